package lease

import (
	"fmt"
	"testing"

	"github.com/redisleader/redisleader/internal/wire"
)

// TestSessionPushFramesOutgrowGoRedisPeek backs the #3935 warning's claim
// that the session's own frames are not held: the shortest frame its pub/sub
// connection receives (a message or a (un)subscribe confirmation on the
// channel of a one-byte name, with an empty payload) is longer than what
// go-redis 9.20.1–9.21.x waits for.
func TestSessionPushFramesOutgrowGoRedisPeek(t *testing.T) {
	ch := NewKeys("a").Channel
	bulk := func(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }
	for _, frame := range []string{
		">3\r\n" + bulk("message") + bulk(ch) + bulk(""),
		">3\r\n" + bulk("subscribe") + bulk(ch) + ":1\r\n",
		">3\r\n" + bulk("unsubscribe") + bulk(ch) + ":0\r\n",
	} {
		if len(frame) <= wire.GoRedisPeekLen {
			t.Errorf("frame %q is %d bytes, go-redis 9.20.1–9.21.x would hold it (it waits for %d)", frame, len(frame), wire.GoRedisPeekLen)
		}
	}
}
