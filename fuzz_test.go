package redisleader

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/redisleader/redisleader/internal/durations"
	"github.com/redisleader/redisleader/internal/lease"
)

// Fuzz targets for everything this package parses from Redis or takes from
// its users. Each checks properties, not only that nothing panics. Seeds are
// the real formats; .ci/fuzz runs each for a few seconds, and the README
// (Running the tests) gives the command for a long run.

// FuzzParseHolder: a stored lock value "<token>\n<fence>\n<value>" is
// accepted exactly when it has two newlines with a decimal int64 between
// them, the parts put back together give the stored value, and every value
// this package writes (a token without newline, any fence, any value)
// reads back as written.
func FuzzParseHolder(f *testing.F) {
	f.Add("QJ4U7XKPNDCCN5ETBQ3CAGVV3A\n1764500000000000\nhost-a:8080", "QJ4U7XKPNDCCN5ETBQ3CAGVV3A", int64(1764500000000000), "host-a:8080")
	f.Add("tok\n100\nv", "tok", int64(100), "")
	f.Add("tok\n-0\nmulti\nline\nvalue", "t", int64(-1), "a\nb")
	f.Add("tok\n+5\n", "", int64(math.MaxInt64), "\x00")
	f.Add("tok\n99999999999999999999\nv", "x\ny", int64(math.MinInt64), "v")
	f.Add("tok\nno-newline-after-the-fence", "tok", int64(0), "")
	f.Add("", "", int64(0), "")
	f.Fuzz(func(t *testing.T, stored, token string, fence int64, value string) {
		h, ok := lease.ParseHolder(stored)
		parts := strings.SplitN(stored, "\n", 3)
		n, perr := strconv.ParseInt(safeIndex(parts, 1), 10, 64)
		// A fence as this package writes one: no sign, no leading zero.
		canonical := perr == nil && n >= 0 && strconv.FormatInt(n, 10) == parts[1]
		if want := len(parts) == 3 && canonical; ok != want {
			t.Fatalf("parseHolder(%q) ok = %v, want %v", stored, ok, want)
		}
		if ok {
			if strings.Contains(h.Token, "\n") {
				t.Fatalf("token %q contains a newline", h.Token)
			}
			if back := h.Token + "\n" + parts[1] + "\n" + h.Value; back != stored {
				t.Fatalf("parts of %q put back give %q", stored, back)
			}
			if n, _ := strconv.ParseInt(parts[1], 10, 64); n != h.Fence {
				t.Fatalf("fence of %q = %d, want %d", stored, h.Fence, n)
			}
		} else if h != (lease.Holder{}) {
			t.Fatalf("parseHolder(%q) failed but returned %+v", stored, h)
		}
		// What the acquire script writes (fences are never negative) reads
		// back as written.
		token, fence = strings.ReplaceAll(token, "\n", ""), max(fence, -fence, 0)
		written := token + "\n" + strconv.FormatInt(fence, 10) + "\n" + value
		if got, ok := lease.ParseHolder(written); !ok || got != (lease.Holder{Token: token, Fence: fence, Value: value}) {
			t.Fatalf("parseHolder(%q) = %+v, %v; want %q %d %q", written, got, ok, token, fence, value)
		}
	})
}

func safeIndex(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// replyShape builds a script reply from fuzzed parts: what a server, or
// anything between us and it, might send back in place of a real reply.
func replyShape(shape uint8, n1, n2 int64, s string) any {
	switch shape % 9 {
	case 0:
		return []any{n1, n2} // acquired: {1, fence}
	case 1:
		return []any{n1, s, n2} // held: {0, stored, pttl}
	case 2:
		return []any{n1, s}
	case 3:
		return []any{s, n1, n2}
	case 4:
		return []any{n1, n2, s, s}
	case 5:
		return n1
	case 6:
		return s
	case 7:
		return []any{n1, []any{s}, redis.Nil}
	default:
		return nil
	}
}

// FuzzAcquireReply: the acquire script's reply is where Go reads a fence.
// Whatever it holds, the decoding succeeds only for {1, fence} and for one
// integer (the fence, also the time the TTL runs from) and returns that
// fence; a lock held by another owner is ErrLocked with the holder's fence
// and nothing else (never its token or value), a holder this package did
// not write (fence 0 included) a permanent error that does not quote it, a
// reply of another kind an error that repeats none of it, and a PTTL it did
// not get is "no TTL" (-1), never a made-up wait.
func FuzzAcquireReply(f *testing.F) {
	f.Add(uint8(0), int64(1), int64(1764500000000000), "")
	f.Add(uint8(1), int64(0), int64(4200), "SECRETTOKENSECRETTOKEN\n1764500000000000\nhost-a:8080")
	f.Add(uint8(1), int64(0), int64(-1), "SECRETTOKENSECRETTOKEN\nnot-a-fence\nhost-a:8080")
	f.Add(uint8(2), int64(0), int64(0), "SECRETTOKENSECRETTOKEN\n7\nv")
	f.Add(uint8(3), int64(1), int64(2), "1")
	f.Add(uint8(5), int64(1), int64(0), "")
	f.Fuzz(func(t *testing.T, shape uint8, n1, n2 int64, s string) {
		reply := replyShape(shape, n1, n2, s)
		l := &Lock{lease: lease.Lease{Keys: lease.NewKeys("fuzz")}}
		r := l.lease.Outcome(reply, nil)
		res, isSlice := reply.([]any)
		switch n, isInt := reply.(int64); {
		case isInt:
			if r.Err != nil || r.Fence != n || r.At != n {
				t.Fatalf("integer reply %d decoded as %+v", n, r)
			}
			return
		case !isSlice:
			want := fmt.Sprintf("redisleader: acquire \"fuzz\": unexpected reply %T", reply)
			if r.Err == nil || r.Err.Error() != want {
				t.Fatalf("reply %#v: err %v, want %q", reply, r.Err, want)
			}
			return
		}
		if len(res) < 2 {
			// Not a reply the script gives: an error that repeats none of it.
			want := fmt.Sprintf("redisleader: acquire \"fuzz\": unexpected reply of %d elements", len(res))
			if r.Err == nil || r.Err.Error() != want {
				t.Fatalf("short reply %v: err %v, want %q", res, r.Err, want)
			}
			return
		}
		if ok, _ := res[0].(int64); ok == 1 {
			want, _ := res[1].(int64)
			if r.Err != nil || r.Fence != want {
				t.Fatalf("acquired reply %v decoded as %+v", res, r)
			}
			return
		}
		stored, _ := res[1].(string)
		h, ok := lease.ParseHolder(stored)
		if !ok || h.Fence == 0 {
			// Data this package did not write (a holder that is no string,
			// or a lock value with fence 0, which a lock key never holds):
			// permanent, and never quoted.
			if !permanent(r.Err) || errors.Is(r.Err, ErrLocked) || (len(stored) > 8 && strings.Contains(r.Err.Error(), stored)) {
				t.Fatalf("foreign value %v: err %v, want a permanent error that does not quote it", res[1], r.Err)
			}
			return
		}
		want := h.Fence
		if !errors.Is(r.Err, ErrLocked) {
			t.Fatalf("reply %v: err %v, want ErrLocked", res, r.Err)
		}
		if r.Fence != want {
			t.Fatalf("reply %v: fence %d, want the holder's %d", res, r.Fence, want)
		}
		if msg := fmt.Sprintf("%s (fence %d)", ErrLocked, want); r.Err.Error() != msg {
			t.Fatalf("reply %v: message %q, want only the fence: %q", res, r.Err, msg)
		}
		wantLeft := time.Duration(-1)
		if len(res) == 2 {
			wantLeft = 0
		} else if ms, ok := res[2].(int64); ok && ms >= 0 {
			wantLeft = time.Duration(math.MaxInt64) // saturated: a PTTL beyond a Duration
			if ms <= math.MaxInt64/int64(time.Millisecond) {
				wantLeft = time.Duration(ms) * time.Millisecond
			}
		}
		if r.Left != wantLeft {
			t.Fatalf("reply %v: wait %v, want %v", res, r.Left, wantLeft)
		}
	})
}

// FuzzFencedReply: the fenced script's reply decodes to nil only for 1, to
// ErrStaleFence only for {0, highest} with highest above the refused fence
// (and the message says exactly the two fences), and to an error that says
// nothing of the reply's content otherwise.
func FuzzFencedReply(f *testing.F) {
	f.Add(uint8(5), int64(1), int64(0), "", int64(7))
	f.Add(uint8(0), int64(0), int64(9), "", int64(7))
	f.Add(uint8(0), int64(0), int64(7), "", int64(7))
	f.Add(uint8(2), int64(0), int64(9), "secret value", int64(7))
	f.Add(uint8(6), int64(0), int64(0), "OK secret", int64(1))
	f.Fuzz(func(t *testing.T, shape uint8, n1, n2 int64, s string, fence int64) {
		res := replyShape(shape, n1, n2, s)
		err := lease.FencedReply("k", fence, res)
		if res == int64(1) {
			if err != nil {
				t.Fatalf("reply 1: %v", err)
			}
			return
		}
		if err == nil {
			t.Fatalf("reply %#v accepted", res)
		}
		r, _ := res.([]any)
		highest, isInt := safeAny(r, 1).(int64)
		stale := len(r) == 2 && r[0] == int64(0) && isInt && highest > fence
		if errors.Is(err, ErrStaleFence) != stale {
			t.Fatalf("reply %#v to fence %d: %v", res, fence, err)
		}
		want := fmt.Sprintf("redisleader: fenced write to \"k\": unexpected reply of type %T", res)
		if stale {
			want = fmt.Sprintf("redisleader: stale fence: fence %d for key \"k\" is below %d, the highest fence it has accepted; nothing was written", fence, highest)
		}
		if err.Error() != want {
			t.Fatalf("reply %#v: message %q, want %q", res, err, want)
		}
	})
}

func safeAny(s []any, i int) any {
	if i < len(s) {
		return s[i]
	}
	return nil
}

// FuzzFencedInput: FencedSet's and FencedDel's input rule and the command
// they send. Any key, value and fence give, through a client that records
// what it is asked to send: for a non-empty key and a fence in
// [1, 2^53−1], exactly one EVALSHA of the fenced script with the key as its
// one key and the fence and value (none for FencedDel) as its arguments;
// otherwise no command at all and an ErrInvalid error naming the rule, on
// one line (the key is quoted: a newline in it cannot forge a log line).
func FuzzFencedInput(f *testing.F) {
	f.Add("cursor", "v", int64(1764500000000000), false)
	f.Add("", "v", int64(1), false)
	f.Add("k", "", int64(0), true)
	f.Add("k\nlevel=ERROR msg=forged", "v", int64(-1), false)
	f.Add("{tag}k", "v", int64(lease.MaxFence), true)
	f.Add("k", "\x00", int64(lease.MaxFence-1), false)
	f.Fuzz(func(t *testing.T, key, value string, fence int64, del bool) {
		c := &recordingClient{}
		var err error
		want := []any{"evalsha", lease.FencedRun.SHA(), 1, key, fence, value}
		if del {
			err = FencedDel(context.Background(), c, key, fence)
			want = want[:5]
		} else {
			err = FencedSet(context.Background(), c, key, value, fence)
		}
		if key != "" && fence >= 1 && fence <= 1<<53-1 {
			if err != nil || len(c.sent) != 1 || !reflect.DeepEqual(c.sent[0], want) {
				t.Fatalf("key %q fence %d: err %v, sent %v; want %v", key, fence, err, c.sent, want)
			}
			return
		}
		if len(c.sent) != 0 || !errors.Is(err, ErrInvalid) {
			t.Fatalf("key %q fence %d: err %v, sent %v", key, fence, err, c.sent)
		}
		msg := err.Error()
		if !strings.Contains(msg, "key must not be empty") && !strings.Contains(msg, "must be within [1, 2^53-1]") {
			t.Fatalf("message %q names no rule", msg)
		}
		oneLine(t, msg)
	})
}

// recordingClient is a Client that records each command it is asked to
// send and answers 1, as the fenced script does when it accepts a write.
type recordingClient struct {
	Client // nil: any other method panics
	sent   [][]any
}

func (c *recordingClient) Process(_ context.Context, cmd redis.Cmder) error {
	c.sent = append(c.sent, cmd.Args())
	cmd.(*redis.Cmd).SetVal(int64(1))
	return nil
}

// oneLine fails t if msg contains a control character or invalid UTF-8.
func oneLine(t *testing.T, msg string) {
	t.Helper()
	if !utf8.ValidString(msg) || strings.IndexFunc(msg, unicode.IsControl) >= 0 {
		t.Fatalf("message %q is not one clean line", msg)
	}
}

// FuzzNameAndValue: names and values from users. A name is accepted exactly
// when it follows the documented rule, and then it is the hash tag of its
// keys (one Cluster slot); otherwise the error matches ErrInvalid, names the
// rule and is one clean line. A value (the fuzzed one, and one of a fuzzed
// length up to 128 KiB) is accepted exactly up to 64 KiB, and its error
// gives its length, never its content.
func FuzzNameAndValue(f *testing.F) {
	f.Add("scheduler", "host-a:8080", uint16(0))
	f.Add("", "", uint16(maxValueLen/2))
	f.Add("a{b}", "v", uint16(maxValueLen/2+1))
	f.Add("job\nlevel=ERROR", "\x00", uint16(1))
	f.Add("\xff\xfe", "v", uint16(0xffff))
	f.Add("\u2028name\u0085", "v", uint16(7))
	f.Add(strings.Repeat("n", lease.MaxNameLen+1), "v", uint16(0))
	long := strings.Repeat("x", 2*maxValueLen)
	f.Fuzz(func(t *testing.T, name, value string, halfLen uint16) {
		err := lease.CheckName(name)
		valid := name != "" && len(name) <= lease.MaxNameLen && !strings.ContainsAny(name, "{}") &&
			utf8.ValidString(name) && strings.IndexFunc(name, unicode.IsControl) < 0
		if (err == nil) != valid {
			t.Fatalf("checkName(%q) = %v", name, err)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "name") {
				t.Fatalf("checkName(%q) = %v", name, err)
			}
			oneLine(t, err.Error())
		} else {
			k := lease.NewKeys(name)
			for _, key := range []string{k.Lock, k.Fence, k.Channel} {
				open := strings.IndexByte(key, '{')
				end := strings.IndexByte(key[open:], '}')
				if open < 0 || end < 0 || key[open+1:open+end] != name {
					t.Fatalf("key %q of name %q: hash tag is not the name", key, name)
				}
			}
		}
		for _, v := range []string{value, long[:2*int(halfLen)]} {
			err = checkValue(v)
			if (err == nil) != (len(v) <= maxValueLen) {
				t.Fatalf("checkValue(%d bytes) = %v", len(v), err)
			}
			if err != nil {
				want := fmt.Sprintf("redisleader: value is %d bytes long; it must be at most %d", len(v), maxValueLen)
				if !errors.Is(err, ErrInvalid) || err.Error() != want {
					t.Fatalf("checkValue: %v", err)
				}
			}
		}
	})
}

// FuzzOptions: any combination of the duration and drift options gives a
// configuration that keeps every documented rule (checked in exact integer
// arithmetic, without overflow), or an error matching ErrInvalid that names
// an option; never a panic.
func FuzzOptions(f *testing.F) {
	ms := int64(time.Millisecond)
	f.Add(uint8(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), int64(0), 0.0)
	f.Add(uint8(0xff), 15000*ms, 5000*ms, 1000*ms, 5*ms, 100*ms, 50*ms, 0*ms, 0.01)
	f.Add(uint8(0x03), 10*ms, 3*ms, 0*ms, 0*ms, 0*ms, 0*ms, 0*ms, 0.0)
	f.Add(uint8(0x40), 0*ms, 0*ms, 0*ms, 0*ms, 0*ms, 0*ms, 0*ms, math.NaN())
	f.Add(uint8(0x05), 1500*ms+1, 0*ms, int64(math.MaxInt64), 0*ms, 0*ms, 0*ms, 0*ms, 0.0)
	f.Add(uint8(0x80), 0*ms, 0*ms, 0*ms, 0*ms, 0*ms, 0*ms, int64(-1), 0.0)
	f.Fuzz(func(t *testing.T, set uint8, ttl, renew, call, margin, retry, jitter, takeover int64, drift float64) {
		var opts []Option
		add := func(bit uint8, o Option) {
			if set&bit != 0 {
				opts = append(opts, o)
			}
		}
		add(0x01, WithTTL(time.Duration(ttl)))
		add(0x02, WithRenewInterval(time.Duration(renew)))
		add(0x04, WithCallTimeout(time.Duration(call)))
		add(0x08, WithMargin(time.Duration(margin)))
		add(0x10, WithRetryInterval(time.Duration(retry)))
		add(0x20, WithRetryJitter(time.Duration(jitter)))
		add(0x40, WithDriftFactor(drift))
		add(0x80, WithTakeoverDelay(time.Duration(takeover)))
		c, err := buildConfig(opts)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v: not ErrInvalid", err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "redisleader: With") && !strings.HasPrefix(msg, "redisleader: the default") {
				t.Fatalf("%q names no option", msg)
			}
			oneLine(t, err.Error())
			return
		}
		checkRules(t, c)
	})
}

// checkRules fails t unless c keeps every rule the options document.
func checkRules(t *testing.T, c config) {
	t.Helper()
	d := func(x time.Duration) *big.Int { return big.NewInt(int64(x)) }
	sum := func(xs ...*big.Int) *big.Int {
		s := new(big.Int)
		for _, x := range xs {
			s.Add(s, x)
		}
		return s
	}
	ttl := d(c.TTL)
	rules := []struct {
		ok   bool
		rule string
	}{
		{c.TTL >= durations.MinTTL && c.TTL <= durations.MaxTTL && c.TTL%time.Millisecond == 0, "TTL in [10ms, 24h], whole ms"},
		{c.Drift >= durations.MinDrift && c.Drift <= durations.MaxDrift, "drift within [0.001, 0.1]"},
		{c.Margin >= durations.MinMargin && new(big.Int).Mul(d(c.Margin), big.NewInt(20)).Cmp(ttl) <= 0, "margin ≥ 2ms and ≤ TTL/20"},
		{c.RenewInterval >= durations.MinInterval && c.RenewInterval <= c.TTL/3, "renew interval in [1ms, TTL/3]"},
		{c.RetryInterval >= durations.MinInterval && c.RetryInterval <= c.TTL, "retry interval in [1ms, TTL]"},
		{c.RetryJitter == 0 || (c.RetryJitter >= durations.MinInterval && c.RetryJitter <= c.TTL), "jitter 0 or in [1ms, TTL]"},
		{c.TakeoverDelay == 0 || (c.TakeoverDelay >= durations.MinInterval && c.TakeoverDelay <= durations.MaxTTL), "takeover delay 0 or in [1ms, 24h]"},
		{c.CallTimeout >= durations.MinInterval, "call timeout ≥ 1ms"},
	}
	for _, r := range rules {
		if !r.ok {
			t.Fatalf("accepted %+v, which breaks the rule %s", c, r.rule)
		}
	}
	// renewInterval + 2 × callTimeout + min(renewInterval, retryInterval +
	// retryJitter) < TTL·(1−drift) − margin, without overflow.
	retryMax := sum(d(c.RetryInterval), d(c.RetryJitter))
	if retryMax.Cmp(d(c.RenewInterval)) > 0 {
		retryMax = d(c.RenewInterval)
	}
	need := sum(d(c.RenewInterval), d(c.CallTimeout), d(c.CallTimeout), retryMax)
	validity := new(big.Int).Sub(big.NewInt(int64(float64(c.TTL)*(1-c.Drift))), d(c.Margin))
	if need.Cmp(validity) >= 0 {
		t.Fatalf("accepted %+v: renewInterval + 2 × callTimeout + retry delay = %v is not below TTL·(1−drift) − margin = %v",
			c, time.Duration(need.Int64()), time.Duration(validity.Int64()))
	}
}
