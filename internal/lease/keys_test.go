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
	if n := testing.AllocsPerRun(100, func() { _ = NewKeys("n") }); n != 3 {
		t.Errorf("NewKeys allocates %v times; want 3 (the keys, the lock and fence keys boxed)", n)
	}
}

// Every constructor of Keys boxes the lock and fence keys that the leases
// made with them pass to their scripts (New), and New boxes them for keys
// made otherwise.
func TestKeysArgs(t *testing.T) {
	rw, _ := RWKeysOf("n")
	sem, _ := SemKeysOf("n")
	bare := NewKeys("n")
	bare.lockArg, bare.fenceArg = nil, nil // as a Keys literal would be
	if a := New(bare, 1000, "v", Plain{}).Args; a.Lock != bare.Lock || a.Fence != bare.Fence {
		t.Errorf("keys made without a constructor: a lease's arguments are %v, %v", a.Lock, a.Fence)
	}
	for _, k := range []Keys{NewKeys("n"), rw, sem} {
		if k.lockArg != k.Lock || k.fenceArg != k.Fence {
			t.Errorf("keys %q, %q: boxed as %v, %v", k.Lock, k.Fence, k.lockArg, k.fenceArg)
		}
		if a := New(k, 1000, "v", Plain{}).Args; a.Lock != k.Lock || a.Fence != k.Fence {
			t.Errorf("keys %q, %q: a lease's arguments are %v, %v", k.Lock, k.Fence, a.Lock, a.Fence)
		}
	}
}
