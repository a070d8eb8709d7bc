package lease

import "testing"

// NewKeys lays out a name's keys and channel as the scripts do: the lock
// key, then its suffixes.
func TestNewKeys(t *testing.T) {
	for _, name := range []string{"n", "a longer name, é"} {
		k := NewKeys(name)
		if k.Lock != "redisleader:{"+name+"}" || k.Fence != k.Lock+fenceSuffix || k.Channel != k.Lock+channelSuffix {
			t.Errorf("NewKeys(%q) = %+v", name, k)
		}
		if k.Queue != k.Lock+queueSuffix || k.Leases != k.Lock+leasesSuffix ||
			k.Candidates != k.Lock+candSuffix || k.CandidateLeases != k.Lock+candLeaseSuf {
			t.Errorf("NewKeys(%q): the modes' keys are %+v", name, k)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = NewKeys("n") }); n != 1 {
		t.Errorf("NewKeys allocates %v times; want 1", n)
	}
}
