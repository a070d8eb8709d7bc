// Package leak finds goroutines that outlived what started them, for this
// module's tests: the library's own (Session, Lock, Election, watcher and
// the go-redis pub/sub readers it starts) and the fault proxy's.
package leak

import (
	"runtime"
	"slices"
	"strings"
	"time"
)

// Markers that identify goroutines by a function on their stack.
var (
	// Library marks goroutines of the redisleader package, of its floors
	// (internal/lease: a Redlock round's node calls; internal/wire: the
	// combiners' flushers and carriers, the watcher, UntilDone's call; not
	// wire.Go, which tests use too) and the go-redis pub/sub readers they
	// start.
	Library = []string{
		"redisleader.(*Session)", "redisleader.(*Lock)", "redisleader.(*Election)",
		"redisleader/internal/lease.", "wire.(*Combiner)", "wire.(*watcher)", "wire.UntilDone",
		"go-redis/v9.(*PubSub)",
	}
	// Proxy marks goroutines of internal/faultproxy.
	Proxy = []string{"faultproxy.(*Proxy)"}
)

// Goroutines returns the stacks of the running goroutines, other than the
// caller's, whose stack mentions any of markers.
func Goroutines(markers ...string) []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i > 0 && slices.ContainsFunc(markers, func(m string) bool { return strings.Contains(g, m) }) {
			out = append(out, g)
		}
	}
	return out
}

// Wait gives such goroutines up to d to return (a goroutine may signal that
// it is done a few instructions before it returns) and returns the stacks
// of those still running then, or "" when there are none.
func Wait(d time.Duration, markers ...string) string {
	deadline := time.Now().Add(d)
	for {
		g := Goroutines(markers...)
		if len(g) == 0 || time.Now().After(deadline) {
			return strings.Join(g, "\n\n")
		}
		runtime.Gosched()
		<-time.After(time.Millisecond) // polling interval of a deadline-bounded wait
	}
}
