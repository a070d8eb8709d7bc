// Command figures draws the pictures in docs/img from code and data, never
// by hand:
//
//	cd bench && go run ./cmd/figures
//
// lease-timeline.svg is the lease timeline with the library's default
// timing, read from the source of internal/durations/durations.go (its
// constants and the derived defaults Derive computes); bench-latency.svg plots the
// latency distributions in latency.json, which a bench run writes
// (go run . -only latency -samples latency.json). Its test fails when a
// checked-in picture differs from what this draws.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/redisleader/redisleader/bench/internal/latency"
)

func main() {
	options := flag.String("options", "../internal/durations/durations.go", "the library's durations.go, whose defaults the timeline draws")
	samples := flag.String("samples", "latency.json", "the latency distributions a bench run wrote (-samples)")
	out := flag.String("out", "../docs/img", "folder the SVG files are written to")
	flag.Parse()
	if err := draw(*options, *samples, *out); err != nil {
		fmt.Fprintln(os.Stderr, "figures:", err)
		os.Exit(1)
	}
}

// The files draw writes, in out.
const (
	timelineFile = "lease-timeline.svg"
	latencyFile  = "bench-latency.svg"
)

func draw(options, samples, out string) error {
	t, err := readTiming(options)
	if err != nil {
		return err
	}
	f, err := latency.Read(samples)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for name, svg := range map[string]string{timelineFile: timeline(t), latencyFile: latencyPlot(f)} {
		path := filepath.Join(out, name)
		if err := os.WriteFile(path, []byte(svg), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}
