package redisleader

import (
	"time"

	"github.com/redisleader/redisleader/internal/probe"
)

// testHookArmed, when set by a test, runs in arm between registering the
// lock and starting its deadline timer.
var testHookArmed func(*Lock)

// emitLocked reports a lease event of a delivered acquisition to the
// reliability tests' probe (a no-op unless a test installed one). l.mu must
// be held.
func (l *Lock) emitLocked(kind string, at time.Time) {
	if !l.delivered || !probe.On() {
		return
	}
	probe.Emit(probe.Event{Kind: kind, Name: l.keys.name, Value: l.value, Token: l.token, Fence: l.fence,
		At: at, Sent: l.renewed, Deadline: l.deadline, Reason: l.err})
}
