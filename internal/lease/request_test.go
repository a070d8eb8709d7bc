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
	for sha, src := range map[string]string{RequestSendSHA: RequestSendSrc, RequestTakeSHA: RequestTakeSrc} {
		sum := sha1.Sum([]byte(src))
		assert.Equal(t, hex.EncodeToString(sum[:]), sha)
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
	assert.Equal(t, []any{nil, nil, 1, "k", "ID 5\nB x\ny", int64(1500)}, SendArgs("k", q, 1500*time.Millisecond))
	assert.Equal(t, []any{nil, nil, 1, "k", "", "5", "", ""}, TakeArgs("k", 5))
	assert.Equal(t, []any{nil, nil, 1, "k", "ID", "", "", ""}, WithdrawArgs("k", "ID"))
	assert.Equal(t, []any{nil, nil, 1, "k", "ID", "", "ID 5\nB x\ny", int64(2000)}, ReaddressArgs("k", q, 2*time.Second))
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
