package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redisleader/redisleader"
	"github.com/redisleader/redisleader/bench/internal/latency"
	"github.com/redisleader/redisleader/internal/redisserver"
)

// TestFiguresUpToDate: the SVGs in docs/img are what this command draws
// from internal/durations and latency.json, so neither is drawn by hand nor left
// behind when the defaults or the data change.
func TestFiguresUpToDate(t *testing.T) {
	timing, err := readTiming("../../../internal/durations/durations.go")
	if err != nil {
		t.Fatal(err)
	}
	f, err := latency.Read("../../latency.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{timelineFile: timeline(timing), latencyFile: latencyPlot(f)} {
		got, err := os.ReadFile(filepath.Join("../../../docs/img", name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("docs/img/%s is not what cmd/figures draws: regenerate it with `cd bench && go run ./cmd/figures`", name)
		}
	}
}

// TestTimingIsTheLibrarys: the validity the timeline reads from internal/durations
// is the one a default Session gives a lock: its deadline lies validity
// after the acquire's send.
func TestTimingIsTheLibrarys(t *testing.T) {
	timing, err := readTiming("../../../internal/durations/durations.go")
	if err != nil {
		t.Fatal(err)
	}
	if timing.ttl != 15 || timing.renew != 5 || timing.validity <= 0 || timing.validity >= timing.ttl {
		t.Fatalf("read %+v from internal/durations", timing)
	}
	srv := redisserver.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	s, err := redisleader.NewSession(client)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	before := time.Now()
	l, err := s.TryLock(ctx, "figures")
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	validity := time.Duration(timing.validity * float64(time.Second))
	if d := l.Deadline(); d.Before(before.Add(validity)) || d.After(after.Add(validity)) {
		t.Errorf("deadline %v after the call, want %v after its send (read from internal/durations)", d.Sub(before), validity)
	}
}
