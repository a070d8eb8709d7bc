package lease

import "testing"

// NewKeys lays out a name's keys and channel as the scripts do: the lock
// key, then its suffixes.
func TestNewKeys(t *testing.T) {
	k := NewKeys("n")
	if k.Lock != "redisleader:{n}" || k.Fence != k.Lock+fenceSuffix || k.Channel != k.Lock+channelSuffix {
		t.Errorf("NewKeys(%q) = %+v", "n", k)
	}
}
