package redisleader

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBadNamesWriteNothing(t *testing.T) {
	m, c := newMini(t)
	s := newSession(t, c)
	tests := []struct {
		name, lock, want string
	}{
		{"empty", "", "name must not be empty"},
		{"open brace", "a{b", `name "a{b" must not contain '{' or '}'`},
		{"close brace", "a}b", `must not contain '{' or '}'`},
		{"too long", strings.Repeat("x", 513), "name is 513 bytes long; it must be at most 512"},
		{"not UTF-8", "a\xffb", "must be valid UTF-8"},
		{"newline", "a\nb", `name "a\nb" must not contain control characters`},
		{"escape", "a\x1b[31mb", "must not contain control characters"},
		{"C1 control", "a\u0085b", "must not contain control characters"},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, acquire := range []func(context.Context, string) (*Lock, error){s.Lock, s.TryLock} {
				l, err := acquire(ctx, tt.lock)
				assert.Nil(t, l)
				assert.ErrorIs(t, err, ErrInvalid)
				assert.Contains(t, err.Error(), tt.want)
			}
		})
	}
	assert.Zero(t, m.CommandCount(), "bad names must not reach Redis")
	assert.Empty(t, m.Keys())

	l, err := s.TryLock(ctx, strings.Repeat("x", 512))
	require.NoError(t, err, "512 bytes is the longest valid name")
	require.NoError(t, l.Release(ctx))
}
