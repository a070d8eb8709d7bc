//go:build linux

package scenario

import "testing"

// TestScenarioEdges runs the fast tier's scenarios of the edges where
// deployments break rather than the lease model: a Redis that hangs (S25),
// an exhausted client pool (S26), an ACL permission revoked (S27) and forged
// pub/sub events (S28).
func TestScenarioEdges(t *testing.T) {
	for _, s := range []struct {
		id string
		f  func(*testing.T)
	}{
		{"S25", s25Hung},
		{"S26", s26PoolExhausted},
		{"S27", s27ACLRevoked},
		{"S28", s28Forged},
	} {
		t.Run(s.id, s.f)
	}
}
