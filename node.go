package redisleader

import (
	"context"
	"fmt"

	"github.com/redisleader/redisleader/internal/lease"
)

// node.go: the place of a session on one server beyond its lease's calls
// (lease.Node: acquire, renew, release, inspect), and the leader an inspect
// read (which a quorum's inspect gives too).

// node is the place of a session on one Redis server: lease.Node, whose
// Acquire, Renew, Release, ReleaseAll and Proclaim the session calls, and
// the rest of place here; c is the session's client.
type node struct {
	lease.Node // Acquire, Renew, Release, ReleaseAll, Proclaim
	c          Client
}

func (n *node) inspect(ctx context.Context, k lease.Keys) (Leader, bool, error) {
	r, err := n.Inspect(ctx, k)
	return leaderOf(k, r, err)
}

// leaderOf is the leader of k's name that a place's Inspect read (r, err),
// judged as a Transfer judges it (lease.Inspected.Leads).
func leaderOf(k lease.Keys, r lease.Inspected, err error) (Leader, bool, error) {
	leads := false
	if err == nil {
		leads, err = r.Leads(k)
	}
	switch {
	case err != nil:
		return Leader{}, false, fmt.Errorf("redisleader: leader of %q: %w", k.Name, err)
	case !leads:
		return Leader{}, false, nil
	}
	return Leader{Value: r.Holder.Value, Fence: r.Holder.Fence, TTL: r.TTL}, true, nil
}

func (n *node) each(f func(c Client)) { f(n.c) }

func (n *node) supports(feature) error { return nil }
