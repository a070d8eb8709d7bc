package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// slots.go: "run --slots N NAME -- COMMAND" runs COMMAND while holding one
// of N permits of the semaphore NAME (Session.Semaphore) rather than its
// leadership, and "status NAME" shows the semaphore's holders. A permit is
// a *Lock: run's terms, signals, supervisor and exit statuses are the
// same; what a permit has not (a priority, transfers) is refused or not
// taken.

// slotsFlag is --slots N: an integer or not given, as --priority is.
type slotsFlag struct{ priorityFlag }

// n is the number of permits given (beyond any limit if it exceeds an int32).
func (f *slotsFlag) n() int { return int(min(f.p, 1<<31-1)) }

// slotsInvalid says what is wrong with --slots and the flags beside it,
// or returns "". The limit's range is the library's (slotsOffline).
func (f *runFlags) slotsInvalid() string {
	switch {
	case !f.slots.set:
		return ""
	case f.slots.n() <= 0:
		return fmt.Sprintf("invalid --slots %d: want the number of permits, at least 1", f.slots.p)
	case f.priority.given():
		return "--slots excludes --priority: a permit has no priority (nobody yields a permit)"
	case f.minTerm.given():
		return "--slots excludes --min-term: a permit has no priority (nobody yields a permit)"
	}
	return ""
}

// slotsOffline checks --slots and --value as Session.Semaphore would,
// without I/O, or returns "".
func (f *runFlags) slotsOffline(opts []redisleader.Option) string {
	if !f.slots.set {
		return ""
	}
	client := redis.NewClient(&redis.Options{}) // never used: Semaphore does no I/O
	defer client.Close()
	s, err := redisleader.NewSession(client, opts...) // checked by checkOffline already
	if err != nil {
		return cliOptionError(err)
	}
	defer s.Close(context.Background()) // it holds nothing: no I/O
	if _, err := s.Semaphore(f.name, f.slots.n()); err != nil {
		return fmt.Sprintf("invalid --slots %d: %s", f.slots.p, trimPrefix(err))
	}
	if _, err := s.Semaphore(f.name, f.slots.n(), redisleader.WithPermitValue(f.value)); err != nil {
		return "invalid --value: " + trimPrefix(err)
	}
	return ""
}

// runArgs parses run's flags and returns COMMAND, or the exit status to
// end with. NAME may come as the first argument instead of --name, with
// more flags after it, and COMMAND then after "--":
// "run --slots 2 NAME -- COMMAND".
func runArgs(fs *flag.FlagSet, f *runFlags, args []string, stdout, stderr io.Writer) ([]string, int) {
	if code := parseFlags(fs, runHelp, args, stdout, stderr); code >= 0 {
		return nil, code
	}
	rest := fs.Args()
	if f.name != "" || len(rest) == 0 || afterDashes(args, rest) {
		return rest, -1
	}
	f.name, args = rest[0], rest[1:]
	if code := parseFlags(fs, runHelp, args, stdout, stderr); code >= 0 {
		return nil, code
	}
	command := fs.Args()
	if len(command) > 0 && !afterDashes(args, command) {
		return nil, usageError(stderr, "run", "--name is required, or NAME as the first argument with COMMAND after --, as in redisleader run --slots N NAME -- COMMAND [ARGS...]")
	}
	return command, -1
}

// afterDashes reports whether the flag package stopped parsing args at a
// "--" (which it drops): rest is what followed it.
func afterDashes(args, rest []string) bool {
	n := len(args) - len(rest)
	return n > 0 && args[n-1] == "--"
}

// holdSlots runs the command while holding one of --slots permits of
// NAME: run's terms, each with a permit instead of leadership (permitTerm).
func (r *runner) holdSlots(s *redisleader.Session) int {
	sem, err := s.Semaphore(r.f.name, r.f.slots.n(), redisleader.WithPermitValue(r.f.value))
	if err != nil { // checked by slotsOffline already, but for the client's kind
		r.log.errorf("%s", trimPrefix(err))
		return exitUsage
	}
	r.sem = sem
	return r.terms(nil)
}

// permitTerm acquires a permit, as --try or --wait say, and runs one term
// with it. The permit takes no transfer requests (term with no election).
func (r *runner) permitTerm(ctx context.Context) (*termOutcome, error) {
	permit, err := r.campaignOnce(ctx, r.sem.TryAcquire, r.sem.Acquire)
	r.waiting(nil)
	if err != nil {
		return nil, err
	}
	return r.term(nil, &tenure{lead: permit, ended: permit.Done(), cause: permit.Err}), nil
}

// holding names what run holds while COMMAND runs, for messages.
func (r *runner) holding() string {
	if r.f.slots.set {
		return fmt.Sprintf("the permit of %s", r.f.name)
	}
	return "leadership of " + r.f.name
}

// seeking says what run waits for before COMMAND runs.
func (r *runner) seeking() string {
	if r.f.slots.set {
		return "waiting for " + r.permitOf()
	}
	return "campaigning for leadership of " + r.f.name
}

// won says what run has won once COMMAND may start.
func (r *runner) won() string {
	if r.f.slots.set {
		return "acquired " + r.permitOf()
	}
	return "elected leader of " + r.f.name
}

// permitOf names one permit of --slots N, in words that read right for
// N = 1 too.
func (r *runner) permitOf() string {
	if n := r.f.slots.n(); n != 1 {
		return fmt.Sprintf("one of %d permits of %s", n, r.f.name)
	}
	return "the permit of " + r.f.name
}

// busy says why --try or --wait gave up ("still " for --wait).
func (r *runner) busy(still string) string {
	switch {
	case r.f.slots.set && r.f.slots.n() == 1:
		return fmt.Sprintf("the permit of %s was %sheld", r.f.name, still)
	case r.f.slots.set:
		return fmt.Sprintf("all %d permits of %s were %sheld", r.f.slots.n(), r.f.name, still)
	case still == "":
		return r.f.name + " is led by another process"
	}
	return r.f.name + " was still led by another process"
}

// say is lead, run's word for leadership, or with --slots slot, its
// word for a permit.
func (r *runner) say(lead, slot string) string {
	if r.f.slots.set {
		return slot
	}
	return lead
}

// permitsJSON is a semaphore as status --json prints it.
type permitsJSON struct {
	Limit   int          `json:"limit"`
	Holders []leaderJSON `json:"holders"`
}

// permits reads the holders of the semaphore NAME, for status: nil when
// the name has none (no limit stored, no permit held), or when the Redis
// user may not read them (it uses no semaphores).
func (c *nameCommand) permits(ctx context.Context) (*permitsJSON, error) {
	sem, err := c.session.Semaphore(c.name, 1) // the limit is the handle's, unused by Holders
	if err != nil {
		return nil, err
	}
	holders, limit, err := sem.Holders(ctx)
	switch {
	case denied(err):
		return nil, nil
	case err != nil:
		return nil, err
	case limit == 0 && len(holders) == 0:
		return nil, nil
	}
	out := &permitsJSON{Limit: limit, Holders: []leaderJSON{}}
	for _, h := range holders {
		ms := h.TTL.Milliseconds()
		out.Holders = append(out.Holders, leaderJSON{Value: h.Value, Fence: h.Fence, TTLms: &ms})
	}
	return out, nil
}

// lines are status's lines for the semaphore: a summary, then one line
// per permit, in the order their leases end.
func (p *permitsJSON) lines(pt painter) []string {
	if p == nil {
		return nil
	}
	out := []string{fmt.Sprintf("semaphore %d of %d permits held", len(p.Holders), p.Limit)}
	for _, h := range p.Holders {
		value := printable(h.Value)
		if value == "" {
			value = "-" // acquired without WithPermitValue
		}
		out = append(out, fmt.Sprintf("permit %s (fence %d, ttl %v)", pt.bold(pt.green(value)), h.Fence,
			(time.Duration(*h.TTLms)*time.Millisecond).Round(time.Millisecond)))
	}
	return out
}
