package faultproxy

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// splitterCases are reply streams and the replies they must be cut into.
var splitterCases = []struct {
	name    string
	replies []string
}{
	{"simple", []string{"+OK\r\n"}},
	{"error", []string{"-ERR unknown command\r\n"}},
	{"integer", []string{":-42\r\n"}},
	{"bulk", []string{"$5\r\nhello\r\n"}},
	{"bulk with CRLF inside", []string{"$4\r\n\r\n\r\n\r\n"}},
	{"empty bulk", []string{"$0\r\n\r\n"}},
	{"null bulk", []string{"$-1\r\n"}},
	{"null array", []string{"*-1\r\n"}},
	{"empty array", []string{"*0\r\n"}},
	{"array", []string{"*3\r\n:1\r\n$3\r\nfoo\r\n+bar\r\n"}},
	{"nested arrays", []string{"*2\r\n*2\r\n:1\r\n*0\r\n*1\r\n$-1\r\n"}},
	{"resp3 scalars", []string{"_\r\n", "#t\r\n", ",3.14\r\n", ",inf\r\n", "(3492890328409238509324850943850943825024385\r\n"}},
	{"bulk error", []string{"!21\r\nSYNTAX invalid syntax\r\n"}},
	{"verbatim", []string{"=15\r\ntxt:Some string\r\n"}},
	{"map", []string{"%2\r\n+first\r\n:1\r\n+second\r\n*2\r\n:2\r\n:3\r\n"}},
	{"empty map", []string{"%0\r\n"}},
	{"set", []string{"~2\r\n+a\r\n+b\r\n"}},
	{"attribute before scalar", []string{"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n:42\r\n"}},
	{"attribute inside array", []string{"*2\r\n|1\r\n+ttl\r\n:3600\r\n$1\r\nx\r\n:2\r\n"}},
	{"push", []string{">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"}},
	{"hello map", []string{"%2\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n"}},
	{"several", []string{"+OK\r\n", ":1\r\n", "$3\r\nabc\r\n", "*1\r\n+x\r\n", "_\r\n"}},
	{"large bulk", []string{"$70000\r\n" + strings.Repeat("x", 70000) + "\r\n"}},
}

// feedAll feeds stream to a fresh splitter cut at the given sizes (the last
// size repeats) and returns copies of the replies it produced.
func feedAll(t *testing.T, stream string, sizes func() int) []string {
	t.Helper()
	var s replySplitter
	var got []string
	for rest := stream; rest != ""; {
		n := min(sizes(), len(rest))
		replies, err := s.feed([]byte(rest[:n]))
		require.NoError(t, err)
		for _, r := range replies {
			got = append(got, string(r))
		}
		rest = rest[n:]
	}
	require.Empty(t, s.rest(), "bytes left after the last reply")
	return got
}

func TestSplitter(t *testing.T) {
	for _, tc := range splitterCases {
		t.Run(tc.name, func(t *testing.T) {
			stream := strings.Join(tc.replies, "")
			require.Equal(t, tc.replies, feedAll(t, stream, func() int { return len(stream) }), "one chunk")
			require.Equal(t, tc.replies, feedAll(t, stream, func() int { return 1 }), "byte by byte")
			rng := rand.New(rand.NewPCG(1, 2))
			require.Equal(t, tc.replies, feedAll(t, stream, func() int { return 1 + rng.IntN(7) }), "random chunks")
		})
	}
}

func TestSplitterWholeStream(t *testing.T) {
	var want []string
	for _, tc := range splitterCases {
		want = append(want, tc.replies...)
	}
	stream := strings.Join(want, "")
	rng := rand.New(rand.NewPCG(3, 4))
	require.Equal(t, want, feedAll(t, stream, func() int { return 1 + rng.IntN(100) }))
}

func TestSplitterPartialReplyIsHeld(t *testing.T) {
	var s replySplitter
	replies, err := s.feed([]byte("+OK\r\n*2\r\n$3\r\nab"))
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("+OK\r\n")}, replies)
	require.Equal(t, "*2\r\n$3\r\nab", string(s.rest()))

	replies, err = s.feed([]byte("c\r\n:7\r\n+"))
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("*2\r\n$3\r\nabc\r\n:7\r\n")}, replies)
	require.Equal(t, "+", string(s.rest()))
}

func TestSplitterInvalid(t *testing.T) {
	for _, tc := range []struct{ name, stream, valid string }{
		{"unknown type", "+OK\r\n?x\r\n", "+OK\r\n"},
		{"LF without CR", "+OK\n", ""},
		{"empty line", "\r\n", ""},
		{"bad length", "$abc\r\n", ""},
		{"negative length", "$-2\r\n", ""},
		{"null map", "%-1\r\n", ""},
		{"streamed bulk", "$?\r\n", ""},
		{"bulk without CRLF", "$3\r\nabcXY", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s replySplitter
			replies, err := s.feed([]byte(tc.stream))
			require.ErrorIs(t, err, errProtocol)
			var got string
			for _, r := range replies {
				got += string(r)
			}
			require.Equal(t, tc.valid, got, "replies before the bad bytes")
			require.Equal(t, tc.stream[len(tc.valid):], string(s.rest()))
		})
	}
}
