package lease

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The written-out SHAs are those of the embedded scripts: EVALSHA finds
// them, and a changed script cannot keep an old SHA.
func TestRequestScriptSHAs(t *testing.T) {
	for _, s := range []*Script{RequestSend, RequestTake} {
		sum := sha1.Sum([]byte(s.Src))
		assert.Equal(t, hex.EncodeToString(sum[:]), s.SHA, s.Name)
		assert.Contains(t, s.Src, "guard(function()", "%s: a denial is named as in the other scripts", s.Name)
	}
}

func TestRequestFormat(t *testing.T) {
	q := Request{ID: "ID", Fence: 5, To: "B x\ny"} // a value may hold spaces and newlines
	assert.Equal(t, "ID 5\nB x\ny", q.String())
	assert.Equal(t, "redisleader:{job}:transfer", RequestKey("job"))
	for held, want := range map[string]string{q.String(): "B x\ny", "ID\nB": "B"} {
		to, ok := RequestValue(held)
		assert.True(t, ok, "%q", held)
		assert.Equal(t, want, to)
	}
	_, ok := RequestValue("no request")
	assert.False(t, ok)
	assert.Equal(t, []any{nil, nil, 1, "k", "ID 5\nB x\ny", int64(1500), ""}, SendArgs("k", q.String(), 1500*time.Millisecond, ""))
	assert.Equal(t, []any{nil, nil, 1, "k", "ID 5\nB x\ny", int64(1500), "NX"}, SendArgs("k", q.String(), 1500*time.Millisecond, "NX"))
	assert.Equal(t, []any{nil, nil, 2, "k", "l", "", "5", "", "", "T"}, TakeArgs("k", "l", 5, "T"))
	assert.Equal(t, []any{nil, nil, 2, "k", "l", "ID", "", "", "", ""}, WithdrawArgs("k", "l", "ID"))
	assert.Equal(t, []any{nil, nil, 2, "k", "l", "ID", "", "ID 5\nB x\ny", int64(2000), ""}, ReaddressArgs("k", "l", q, 2*time.Second))
}

func TestTakeReply(t *testing.T) {
	got, err := TakeReply(nil, redis.Nil)
	require.NoError(t, err)
	assert.Equal(t, Taken{}, got)
	got, err = TakeReply([]any{int64(1), "ID 5\nB"}, nil)
	require.NoError(t, err)
	assert.Equal(t, Taken{Present: true, Took: true, Held: "ID 5\nB"}, got)
	got, err = TakeReply([]any{int64(0), "x"}, nil)
	require.NoError(t, err)
	assert.Equal(t, Taken{Present: true, Held: "x"}, got)
	boom := errors.New("boom")
	_, err = TakeReply(nil, boom)
	assert.Equal(t, boom, err)
	_, err = TakeReply([]any{int64(1)}, nil)
	assert.ErrorContains(t, err, "unexpected reply")
}
