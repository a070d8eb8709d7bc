package redisleader

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// CheckHealth reports whether the session's leases are being renewed. It
// returns nil unless the session holds a lock (or leads an election) whose
// last successful acquire or renewal was sent more than the renew interval
// plus tolerance ago: such a process still believes it leads, but cannot
// reach Redis or is not being scheduled, and operators may want it
// restarted before its lease runs out. A tolerance that is not positive is
// treated as zero; use at least the call timeout, since a round's renewal
// is sent only after the previous round's reply arrived. It does no I/O and
// is safe for concurrent use.
//
// This is the idea of client-go's leader-election healthz adaptor.
func (s *Session) CheckHealth(tolerance time.Duration) error {
	limit := s.cfg.RenewInterval + max(tolerance, 0)
	now := time.Now()
	for _, l := range s.held() {
		l.mu.Lock()
		held := l.err == nil && now.Before(l.deadline)
		since := now.Sub(l.renewed)
		l.mu.Unlock()
		if held && since > limit {
			return fmt.Errorf("redisleader: %q is held but was last renewed %v ago (renew interval %v + tolerance %v)",
				l.lease.Keys.Name, since.Round(time.Millisecond), s.cfg.RenewInterval, max(tolerance, 0))
		}
	}
	return nil
}

// HealthHandler returns an http.Handler that serves CheckHealth(tolerance):
// 200 "ok", or 503 with the error.
func (s *Session) HealthHandler(tolerance time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := s.CheckHealth(tolerance); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// checkServer warns, once per session (the heartbeat calls it at its
// first lock), about server settings under which Redis itself can lose a
// lease (lease.CheckServers), on every server of the session's place.
func (s *Session) checkServer(ctx context.Context) {
	lease.CheckServers(ctx, func(check func(c wire.Client)) {
		s.place.each(func(c Client) { check(c) })
	}, s.cfg.CallTimeout, s.cfg.logger, s.cfg.Acks.N > 0)
}
