package history

import "github.com/redisleader/redisleader/internal/probe"

// FromProbe turns a library event into a history event; the candidate's id
// is the election value, and reason words an ended event's error.
func FromProbe(e probe.Event, reason func(error) string) Event {
	ev := Event{Mono: Mono(e.At), Who: e.Value, Kind: e.Kind, Token: e.Token, Fence: e.Fence}
	if !e.Sent.IsZero() {
		ev.Sent = Mono(e.Sent)
	}
	if !e.Deadline.IsZero() {
		ev.Deadline = Mono(e.Deadline)
	}
	if e.Reason != nil {
		ev.Reason = reason(e.Reason)
	}
	return ev
}
