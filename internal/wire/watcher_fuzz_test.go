package wire

import "testing"

// FuzzWatcherMessages: what the session's pub/sub connection receives is
// untrusted (anyone allowed to PUBLISH can send anything). A message's
// payload never reaches the watcher: watcher.run passes deliver only the
// channel (events carry no content, "A" or "R", and are hints to read
// Redis). What remains is any sequence of messages and subscription
// replies on any channels, handled as watcher.run handles them: a waiter
// counts exactly the messages on its channel (it keeps only a count and a
// gap flag), replies about other channels change nothing, and an
// unsubscribe of its confirmed channel is a gap and a new SUBSCRIBE.
func FuzzWatcherMessages(f *testing.F) {
	f.Add([]byte{0, 0, 0}, "redisleader:{other}:ch")
	f.Add([]byte{0, 1, 2, 0, 3, 1}, "redisleader:{jobs}:ch")
	f.Add([]byte{2, 0, 1, 4, 5, 6}, "")
	f.Add([]byte{3, 3, 1, 1, 6, 2}, "redisleader:{jobs}:ch\x00")
	f.Fuzz(func(t *testing.T, ops []byte, other string) {
		const mine = "redisleader:{jobs}:ch"
		w := &watcher{chans: map[string]*channelSubs{}, kick: make(chan struct{}, 1)}
		cs := &channelSubs{channel: mine, ready: make(chan struct{}), subs: map[*Subscription]struct{}{}}
		w.chans[mine] = cs
		sub := &Subscription{w: w, cs: cs, notify: make(chan struct{}, 1)}
		cs.subs[sub] = struct{}{}
		var wantMsgs int
		var wantGap bool
		confirmed, resubscribe := false, false
		for _, op := range ops {
			channel := mine
			if op&4 != 0 {
				channel = other
			}
			// What watcher.run calls for each kind of reply; a PONG
			// (op%4 == 3) reaches none of them.
			switch op % 4 {
			case 0:
				w.deliver(channel, "")
			case 1:
				w.confirm(channel)
			case 2:
				w.unsubscribed(channel)
			}
			if channel != mine {
				continue
			}
			switch op % 4 {
			case 0:
				wantMsgs++
			case 1:
				confirmed = true
			case 2:
				if confirmed {
					wantGap = true
				}
				confirmed, resubscribe = false, true
			}
		}
		if want := map[bool]int{false: 0, true: 1}[resubscribe]; len(w.out.subscribe) != want ||
			(want == 1 && w.out.subscribe[0] != mine) || len(w.out.unsubscribe) != 0 {
			t.Fatalf("outbox %+v; want one SUBSCRIBE of %q: %v", w.out, mine, resubscribe)
		}
		if len(w.chans) != 1 || w.chans[mine] != cs {
			t.Fatalf("replies about other channels added or dropped channels: %v", w.chans)
		}
		if cs.confirmed != confirmed {
			t.Fatalf("confirmed = %v, want %v", cs.confirmed, confirmed)
		}
		if msgs, gap := sub.Take(); msgs != wantMsgs || gap != wantGap {
			t.Fatalf("take() = %d, %v; want %d, %v", msgs, gap, wantMsgs, wantGap)
		}
	})
}
