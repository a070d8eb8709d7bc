package lease

import "testing"

// A stored value parses as a holder, a reservation as a holder without a
// token (and only then as a reservation), anything else not at all.
func TestParseHolderAndReservation(t *testing.T) {
	h, ok := ParseHolder("tok\n42\nv\nw")
	if !ok || h != (Holder{Token: "tok", Fence: 42, Value: "v\nw"}) {
		t.Fatalf("holder: %+v %v", h, ok)
	}
	if _, reserved := h.Reserved(); reserved {
		t.Fatal("a holder with a token is no reservation")
	}
	h, ok = ParseHolder("\n43\nheir")
	r, reserved := h.Reserved()
	if !ok || !reserved || r != (Reservation{Fence: 43, For: "heir"}) {
		t.Fatalf("reservation: %+v %v %+v %v", h, ok, r, reserved)
	}
	for _, bad := range []string{"", "tok", "tok\nx\nv", "tok\n42"} {
		if _, ok := ParseHolder(bad); ok {
			t.Errorf("%q parsed as a holder", bad)
		}
	}
}

// The argument builders put each argument in its script's slot: the lock
// key as KEYS[1] (slot 3), then the keys, then ARGV in the order of the
// script's contract.
func TestArgsVectors(t *testing.T) {
	k := NewKeys("n")
	a := Args{Lock: k.Lock, Fence: k.Fence, Token: "tok", TTL: "1000", Value: "v"}
	var buf [8]any
	want := []any{nil, nil, 2, k.Lock, k.Fence, "tok", "1000", "v"}
	if got := a.Acquire(&buf); !equal(got, want) {
		t.Errorf("acquire: %v, want %v", got, want)
	}
	c := NewCandidate(k, "v", 7)
	want = []any{nil, nil, 4, k.Lock, k.Fence, k.Candidates, k.CandidateLeases, "tok", "1000", "v", "7"}
	if got := c.Enlist(a.Acquire(&buf)); !equal(got, want) {
		t.Errorf("acquire_candidate: %v, want %v", got, want)
	}
	want = []any{nil, nil, 5, k.Lock, k.Queue, k.Leases, k.Candidates, k.CandidateLeases, "tok", "h", "", "v", "1000"}
	if got := a.HandOff(k, "h", ""); !equal(got, want) {
		t.Errorf("hand_off: %v, want %v", got, want)
	}
}

func equal(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
