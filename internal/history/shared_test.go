package history

import "testing"

// Three holders of a limit of 3 overlap safely; a fourth at once is an
// overcommit; fences granted out of order while in flight are fine, a
// fence below one that began before the acquire was sent is not, nor is a
// fence handed out twice.
func TestCheckShared(t *testing.T) {
	safe := []Event{
		acq("A", "a", 10, 10, 9, 200),
		acq("C", "c", 30, 11, 5, 200), // sent at 5, before anyone began
		acq("B", "b", 20, 12, 8, 200), // granted before C's reply came: a lower fence than C's, sent before C began
		end("A", "a", "released", 50),
		acq("D", "d", 40, 60, 55, 200),
		end("B", "b", "released", 100),
		end("C", "c", "released", 100),
		end("D", "d", "released", 100),
	}
	if r := CheckShared(reversed(safe), 3); !r.Safe() || r.MaxHolders != 3 || r.Intervals != 4 {
		t.Fatalf("safe history: %+v", r)
	}
	over := append(safe, acq("E", "e", 50, 70, 65, 200), end("E", "e", "released", 90))
	if r := CheckShared(over, 2); r.Overcommits == 0 || r.Safe() {
		t.Fatalf("4 holders at once under a limit of 2: %+v", r)
	} else if r.Line("X", false) == "" {
		t.Fatal("no line")
	}
	regress := append(safe, acq("E", "e", 15, 70, 65, 200), end("E", "e", "released", 90))
	if r := CheckShared(regress, 5); r.FenceViolations != 1 {
		t.Fatalf("fence 15 sent after fences up to 40 began: %+v", r)
	}
	dup := append(safe, acq("E", "e", 40, 70, 65, 200), end("E", "e", "released", 90))
	if r := CheckShared(dup, 5); r.FenceViolations == 0 {
		t.Fatalf("fence 40 twice: %+v", r)
	}
}

// An acquire whose reply came too late is confirmed by a later attempt
// with the same token: its fence is the first attempt's, granted before
// a permit that began before the confirming attempt was sent. With the
// first attempt's Tried, that is no violation; without it, the checker
// could not know (a regression, as TestChaos seed 7 reported).
func TestCheckSharedConfirmedAttempt(t *testing.T) {
	h := []Event{
		acq("B", "b", 20, 30, 25, 300), // began at 30, fence 20
		acq("A", "a", 10, 60, 50, 300), // confirmed at 50: fence 10, granted at 5
		end("A", "a", "released", 100),
		end("B", "b", "released", 100),
	}
	if r := CheckShared(h, 3); r.FenceViolations != 1 {
		t.Fatalf("without the first attempt: %+v, want the (apparent) regression", r)
	}
	tried := append(h, Event{Mono: at(8), Who: "A", Kind: Tried, Token: "a", Sent: at(5)})
	if r := CheckShared(tried, 3); !r.Safe() {
		t.Fatalf("with the first attempt (sent at 5): %+v", r)
	}
	late := append(h, Event{Mono: at(58), Who: "A", Kind: Tried, Token: "a", Sent: at(50)})
	if r := CheckShared(late, 3); r.FenceViolations != 1 {
		t.Fatalf("a Tried no earlier than the confirming attempt excuses nothing: %+v", r)
	}
}
