package main

import (
	"context"
	"fmt"
	"time"
)

// rwstatus.go: status's lines for a read-write lock of NAME (RWLock): its
// holders and its waiting writers, beside a leader's and a semaphore's.

// rwJSON is a read-write lock as status --json prints it.
type rwJSON struct {
	Holders []rwHolderJSON `json:"holders"`
	Waiting int            `json:"waiting_writers"`
}

// rwHolderJSON is one read or write lease: never its token.
type rwHolderJSON struct {
	Role  string `json:"role"` // "read" or "write"
	Value string `json:"value"`
	Fence int64  `json:"fence"`
	TTLms int64  `json:"ttl_ms"`
}

// rwLock reads the holders and waiting writers of the read-write lock
// NAME, for status: nil when the name has none (no lease held, no writer
// waiting), or when the Redis user may not read them (it uses no
// read-write locks).
func (c *nameCommand) rwLock(ctx context.Context) (*rwJSON, error) {
	rw, err := c.session.RWLock(c.name)
	if err != nil {
		return nil, err
	}
	holders, waiting, err := rw.Holders(ctx)
	switch {
	case denied(err):
		return nil, nil
	case err != nil:
		return nil, err
	case waiting == 0 && len(holders) == 0:
		return nil, nil
	}
	out := &rwJSON{Holders: []rwHolderJSON{}, Waiting: waiting}
	for _, h := range holders {
		role := "read"
		if h.Write {
			role = "write"
		}
		out.Holders = append(out.Holders, rwHolderJSON{Role: role, Value: h.Value, Fence: h.Fence, TTLms: h.TTL.Milliseconds()})
	}
	return out, nil
}

// held reports whether a read or write lease of the lock is held.
func (rw *rwJSON) held() bool { return rw != nil && len(rw.Holders) > 0 }

// lines are status's lines for the read-write lock: a summary, then one
// line per lease, in the order they end.
func (rw *rwJSON) lines(pt painter) []string {
	if rw == nil {
		return nil
	}
	held := "free"
	switch n := len(rw.Holders); {
	case n > 0 && rw.Holders[0].Role == "write":
		held = "held by a writer"
	case n > 0:
		held = fmt.Sprintf("held by %d %s", n, plural(n, "reader"))
	}
	out := []string{fmt.Sprintf("rwlock %s, %d %s waiting", held, rw.Waiting, plural(rw.Waiting, "writer"))}
	for _, h := range rw.Holders {
		value := printable(h.Value)
		if value == "" {
			value = "-" // acquired without WithRWValue
		}
		role := "reader"
		if h.Role == "write" {
			role = "writer"
		}
		out = append(out, fmt.Sprintf("%s %s (fence %d, ttl %v)", role, pt.bold(pt.green(value)), h.Fence,
			(time.Duration(h.TTLms)*time.Millisecond).Round(time.Millisecond)))
	}
	return out
}

// plural is word for n of them: word, or words.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
