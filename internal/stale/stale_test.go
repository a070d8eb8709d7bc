package stale

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestTokens: a mark keeps the later end and repeats if either mark does;
// a sweep forgets a done delete unless repeated, and any token past its end.
func TestTokens(t *testing.T) {
	now := time.Now()
	st := Tokens[string]{}
	st.Mark("a", now.Add(time.Minute), false)
	st.Mark("a", now.Add(time.Second), true)
	assert.Equal(t, Staleness{Until: now.Add(time.Minute), Repeat: true}, st["a"])
	st.Mark("b", now.Add(time.Minute), false)
	st.Mark("c", now.Add(-time.Second), false)

	keys := []string{"a", "b", "c"}
	st.Sweep(keys, func(i int) bool { return keys[i] != "c" }, now)
	assert.Contains(t, st, "a", "repeated: kept until its end")
	assert.NotContains(t, st, "b", "done")
	assert.NotContains(t, st, "c", "past its end, even if not done")
	st.Sweep([]string{"a"}, func(int) bool { return true }, now.Add(2*time.Minute))
	assert.Empty(t, st)
}
