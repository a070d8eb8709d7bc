package redisleader

import (
	"context"

	"github.com/redisleader/redisleader/internal/lease"
	"github.com/redisleader/redisleader/internal/wire"
)

// checkServer warns, once per session (the heartbeat calls it at its
// first lock), about server settings under which Redis itself can lose a
// lease (lease.CheckServers), on every server of the session's place.
func (s *Session) checkServer(ctx context.Context) {
	lease.CheckServers(ctx, func(check func(c wire.Client)) {
		s.place.each(func(c Client) { check(c) })
	}, s.cfg.CallTimeout, s.cfg.logger, s.cfg.Acks.N > 0)
}
