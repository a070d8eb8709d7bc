package redisleader

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHealth(t *testing.T) {
	m, c := newMini(t)
	hook, roundsCh := rounds()
	s := newSession(t, c, WithTTL(2*time.Second), WithRenewInterval(50*time.Millisecond), hook)
	_, err := s.TryLock(context.Background(), "healthy")
	require.NoError(t, err)
	require.False(t, waitRound(t, roundsCh, time.Second))
	require.NoError(t, s.CheckHealth(100*time.Millisecond))
	rec := httptest.NewRecorder()
	s.HealthHandler(100*time.Millisecond).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	assert.Equal(t, http.StatusOK, rec.Code)

	m.SetError("LOADING Redis is loading the dataset in memory")
	deadline := time.After(2 * time.Second)
	for s.CheckHealth(100*time.Millisecond) == nil {
		select {
		case <-roundsCh: // a failed round; check again
		case <-deadline:
			t.Fatal("still healthy while renewals fail")
		}
	}
	err = s.CheckHealth(100 * time.Millisecond)
	assert.ErrorContains(t, err, `"healthy" is held but was last renewed`)
	rec = httptest.NewRecorder()
	s.HealthHandler(100*time.Millisecond).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.Contains(t, rec.Body.String(), "last renewed")
	m.SetError("")
}
