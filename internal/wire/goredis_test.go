package wire

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestGoRedisPubSubBug: the go-redis versions whose RESP3 pub/sub reader
// drops (#3839) or holds (#3935) messages are named with the issue and the
// version that fixes it; the others, and strings that are not versions, get
// no warning. The windows were read off go-redis's tags: the truncated peek
// of push/processor.go appears in v9.15.0-beta.1, #3842 in v9.20.1, #3936 in
// v9.22.0-beta.1.
func TestGoRedisPubSubBug(t *testing.T) {
	const drop, hold = "#3839, fixed in 9.20.1", "#3935, fixed in 9.22.0"
	for _, c := range []struct{ v, want string }{
		{"9.14.1", ""}, // go.mod's floor: no push processing yet
		{"9.15.0-beta.1", drop},
		{"9.15.1", drop},
		{"9.16.0", drop},
		{"v9.18.0", drop},
		{"9.20.0", drop},
		{"9.20.1", hold},
		{"9.21.0", hold},
		{"9.21.7", hold},
		{"9.22.0-beta.1", ""},
		{"9.22.0", ""},
		{"9.23.0", ""}, // bench/'s go-redis
		{"10.0.0", ""},
		{"8.11.5", ""},
		{"", ""},
		{"9.20", ""},
		{"9.x.0", ""},
	} {
		got := goRedisPubSubBug(c.v)
		if c.want == "" {
			if got != "" {
				t.Errorf("go-redis %q: got warning %q, want none", c.v, got)
			}
			continue
		}
		if !strings.Contains(got, c.want) || !strings.Contains(got, "go-redis "+strings.TrimPrefix(strings.Split(c.v, "-")[0], "v")) ||
			!strings.Contains(got, "never safety") && !strings.Contains(got, "safety never") {
			t.Errorf("go-redis %q: warning %q does not name the version, %q and what it costs", c.v, got, c.want)
		}
	}
}

// TestWarnGoRedisOncePerProcess: the warning is logged once (the flag is
// per process), not to a logger that drops warnings (that would use it up),
// and not for a client that asked for RESP2, which has no push frames.
func TestWarnGoRedisOncePerProcess(t *testing.T) {
	resp3 := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // no I/O
	resp2 := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Protocol: 2})
	cluster2 := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, Protocol: 2})
	t.Cleanup(func() { resp3.Close(); resp2.Close(); cluster2.Close() })
	var out bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&out, nil))
	var once atomic.Bool

	warnGoRedis(&once, "9.21.0", resp3, slog.New(slog.DiscardHandler))
	warnGoRedis(&once, "9.21.0", resp3, slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelError})))
	warnGoRedis(&once, "9.21.0", resp2, logger)
	warnGoRedis(&once, "9.21.0", cluster2, logger)
	warnGoRedis(&once, "9.22.0", resp3, logger)
	if out.Len() != 0 || once.Load() {
		t.Fatalf("warned (flag %v) for a dropping logger, RESP2 or a fixed version: %q", once.Load(), out.String())
	}
	warnGoRedis(&once, "9.21.0", resp3, logger)
	warnGoRedis(&once, "9.16.0", resp3, logger)
	if n := strings.Count(out.String(), "level=WARN"); n != 1 || !strings.Contains(out.String(), "#3935") {
		t.Fatalf("want one warning naming #3935, got %d: %q", n, out.String())
	}
}
