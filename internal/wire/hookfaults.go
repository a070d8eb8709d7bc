package wire

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Hook faults: a hook on the user's client (AddHook) that panics, or ends
// its goroutine with runtime.Goexit (as t.FailNow does in a test), while a
// command of ours is on its way. The library sends commands on goroutines
// of its own (renewals, Observe's reads, background deletes, Redlock's node
// calls, shared pipelines), where a panic would end the process and a
// Goexit would silently stop the work. So a panic becomes the error of the
// commands it hit (HookPanicError), a Goexit fails the calls it cut short
// (ErrHookGoexit), and the work they belonged to is cleaned up as after a
// lost reply: an acquire's token is deleted, a heartbeat or an Observe
// reader is restarted after the retry delay, a release is retried by the
// heartbeat. A caller's goroutine so ended (in TryLock, Release, Close, Run)
// leaves nothing that the heartbeat does not delete or the TTL not end. The
// error never quotes the panic value, which can quote tokens. Hooks that
// go-redis runs on goroutines of its own are out of reach: a panic in a
// Cluster client's OnNewNode ends the process; a panic or Goexit in a dial
// or handshake costs the pool a connection for good, and on the session's
// pub/sub connection leaves go-redis's PubSub locked, which ends the process
// or hangs Close.

// OnUnwind runs f and, if f unwinds instead of returning (a hook ended the
// goroutine with runtime.Goexit, or panicked), runs cleanup on the way out;
// a panic then goes on unwinding.
func OnUnwind(f, cleanup func()) {
	returned := false
	defer func() {
		if !returned {
			cleanup()
		}
	}()
	f()
	returned = true
}

// ExecPipeline runs a pipeline and returns its error: that of its first failed
// command, or one that kept every command from running (a hook on the
// client that refused the pipeline, say), or a *HookPanicError.
func ExecPipeline(ctx context.Context, pipe redis.Pipeliner) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &HookPanicError{v}
		}
	}()
	_, err = pipe.Exec(ctx)
	return err
}

// failUnsent gives err, the error of the pipeline that ran cmds, to every
// command that got neither a reply nor an error: one that a pipeline which
// failed as a whole never ran; and a hook's panic to every command.
func failUnsent[C redis.Cmder](cmds []C, err error) {
	if err == nil {
		return
	}
	_, panicked := err.(*HookPanicError)
	for _, cmd := range cmds {
		if panicked || cmd.Err() == nil && unanswered(cmd) {
			cmd.SetErr(err)
		}
	}
}

// unanswered reports whether cmd, without an error, has no reply either.
func unanswered(cmd redis.Cmder) bool {
	switch c := cmd.(type) {
	case *redis.Cmd:
		return c.Val() == nil
	case *redis.StatusCmd: // a native release's MULTI, delete and PUBLISH: "" until answered
		return c.Val() == ""
	case *redis.SliceCmd:
		return c.Val() == nil
	}
	return true
}
