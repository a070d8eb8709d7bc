package history

import (
	"strings"
	"testing"
)

// Readers overlap one another safely; a writer that begins while a reader
// or another writer is believed, or a reader while a writer is, is a
// violation; fences are judged as a shared name's.
func TestCheckRW(t *testing.T) {
	write := func(who string) bool { return strings.HasPrefix(who, "W") }
	safe := []Event{
		acq("R1", "a", 10, 10, 9, 200),
		acq("R2", "b", 20, 12, 11, 200),
		end("R1", "a", "released", 50),
		end("R2", "b", "released", 60),
		acq("W1", "c", 30, 60, 55, 200), // begins as the last reader ends
		end("W1", "c", "released", 90),
		acq("R3", "d", 40, 95, 91, 200),
		end("R3", "d", "released", 120),
	}
	if r := CheckRW(reversed(safe), write); !r.Safe() || r.MaxReaders != 2 || r.Writes != 1 || r.Intervals != 4 {
		t.Fatalf("safe history: %+v", r)
	} else if !strings.Contains(r.Line("X", true), "max_readers=2") {
		t.Fatalf("line: %s", r.Line("X", true))
	}
	readerInWrite := append(safe, acq("R4", "e", 35, 70, 65, 200), end("R4", "e", "released", 80))
	if r := CheckRW(readerInWrite, write); r.ReadWrite != 1 || r.Safe() {
		t.Fatalf("a reader inside a write: %+v", r)
	}
	writeInRead := append(safe, acq("W2", "e", 25, 30, 25, 200), end("W2", "e", "released", 40))
	if r := CheckRW(writeInRead, write); r.ReadWrite != 1 || r.Safe() {
		t.Fatalf("a writer inside reads: %+v", r)
	}
	twoWriters := append(safe, acq("W2", "e", 35, 70, 65, 200), end("W2", "e", "released", 80))
	if r := CheckRW(twoWriters, write); r.WriteWrite != 1 || r.Safe() {
		t.Fatalf("two writers: %+v", r)
	}
	dup := append(safe, acq("R4", "e", 40, 130, 125, 200), end("R4", "e", "released", 140))
	if r := CheckRW(dup, write); r.FenceViolations == 0 {
		t.Fatalf("fence 40 twice: %+v", r)
	}
}

// A read lease whose reply came too late is confirmed by a later attempt
// with the same token and the first attempt's fence (rw_acquire is
// idempotent, as sem_acquire is): CheckRW, too, takes the token's Tried
// send as the lower bound of its grant, or the chaos run's lost replies
// would read as fence regressions.
func TestCheckRWConfirmedAttempt(t *testing.T) {
	write := func(who string) bool { return strings.HasPrefix(who, "W") }
	h := []Event{
		acq("R2", "b", 20, 30, 25, 300), // began at 30, fence 20
		acq("R1", "a", 10, 60, 50, 300), // confirmed at 50: fence 10, granted at 5
		end("R1", "a", "released", 100),
		end("R2", "b", "released", 100),
	}
	if r := CheckRW(h, write); r.FenceViolations != 1 {
		t.Fatalf("without the first attempt: %+v, want the (apparent) regression", r)
	}
	tried := append(h, Event{Mono: at(8), Who: "R1", Kind: Tried, Token: "a", Sent: at(5)})
	if r := CheckRW(tried, write); !r.Safe() || r.MaxReaders != 2 {
		t.Fatalf("with the first attempt (sent at 5): %+v", r)
	}
}
