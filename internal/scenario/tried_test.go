//go:build linux

package scenario

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/history"
)

// triedHook reports sem_acquire's attempts (3 keys) and rw_acquire's (2
// keys: keys 2) on its set with the token, ARGV[1], and skips denials,
// other sets and other scripts.
func TestTriedHook(t *testing.T) {
	ctx := context.Background()
	cmd := func(reply []any, args ...any) redis.Cmder {
		c := redis.NewCmd(ctx, args...)
		c.SetVal(reply)
		return c
	}
	granted, denied := []any{int64(1), int64(7), int64(9)}, []any{int64(0), "m", int64(5)}
	for _, tc := range []struct {
		name string
		hook triedHook
		cmd  redis.Cmder
		want string // the token reported, "" for none
	}{
		{"sem", triedHook{set: "S"}, cmd(granted, "evalsha", "x", 3, "S", "F", "L", "tok", 1), "tok"},
		{"sem-denied", triedHook{set: "S"}, cmd(denied, "evalsha", "x", 3, "S", "F", "L", "tok", 1), ""},
		{"rw", triedHook{set: "R", keys: 2}, cmd(granted, "evalsha", "x", 2, "R", "F", "tok", 1), "tok"},
		{"rw-denied", triedHook{set: "R", keys: 2}, cmd(denied, "evalsha", "x", 2, "R", "F", "tok", 1), ""},
		{"rw-as-sem", triedHook{set: "R"}, cmd(granted, "evalsha", "x", 2, "R", "F", "tok", 1), ""},
		{"other-set", triedHook{set: "R", keys: 2}, cmd(granted, "eval", "x", 2, "Q", "F", "tok", 1), ""},
	} {
		var got []history.Event
		tc.hook.emit = func(e history.Event) { got = append(got, e) }
		tc.hook.seen(tc.cmd, 42)
		switch {
		case tc.want == "" && len(got) != 0:
			t.Errorf("%s: reported %+v", tc.name, got)
		case tc.want != "" && (len(got) != 1 || got[0].Token != tc.want || got[0].Kind != history.Tried || got[0].Sent != 42):
			t.Errorf("%s: reported %+v, want one Tried of %s sent at 42", tc.name, got, tc.want)
		}
	}
}
