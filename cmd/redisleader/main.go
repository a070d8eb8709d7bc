// Command redisleader runs leader elections on Redis from the shell: a demo
// on an embedded Redis, a command that runs on exactly one host at a time,
// and who leads now.
//
//	redisleader demo                               # embedded Redis, nothing to install
//	redisleader run --name NAME -- COMMAND [ARGS]  # run COMMAND only while leader
//	redisleader status NAME                        # who leads now
//	redisleader watch NAME                         # one line per leader change
//
// The Redis address comes from --redis or REDIS_URL (redis://, rediss:// for
// TLS, unix:// for a socket, with user and password in the URL), default
// redis://127.0.0.1:6379. Special characters in the password must be
// percent-encoded. The commands never print the password: they show the URL
// as redis://user:xxxxx@host:port, and a malformed URL is a usage error
// (exit status 2) that shows only that redacted form.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Exit codes shared by the commands.
const (
	exitOK    = 0
	exitError = 1 // Redis unreachable, Redis errors, bad state
	exitUsage = 2 // bad flags or arguments
)

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain dispatches to a command and returns the process exit code.
func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "demo":
		return cmdDemo(ctx, args[1:], stdout, stderr)
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case "status":
		return cmdStatus(ctx, args[1:], stdout, stderr)
	case "watch":
		return cmdWatch(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "redisleader: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `redisleader: leader election on Redis.

Usage:
  redisleader demo [--redis URL]                       show elections at work (embedded Redis by default)
  redisleader run --name NAME [flags] -- COMMAND [ARGS] run COMMAND only while this process leads NAME
  redisleader status [--json] NAME                      print who leads NAME now
  redisleader watch NAME                                print one line per leader change of NAME

Redis: --redis URL or REDIS_URL (redis://[user:pass@]host:port[/db], rediss:// for TLS,
unix://[user:pass@]/path[?db=N]; percent-encode special characters in the password);
default redis://127.0.0.1:6379. The password is never printed: URLs are shown as
redis://user:xxxxx@host:port. Run "redisleader COMMAND --help" for a command's flags.
`)
}

// newFlagSet makes a flag set that prints its usage to stderr and reports
// errors instead of exiting.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: redisleader %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and returns the exit code to use if parsing ended
// the command (help or a bad flag), or -1 to go on.
func parseFlags(fs *flag.FlagSet, args []string) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	return -1
}

// connect makes a client for target with the options this library
// recommends, and checks that Redis answers, so that a wrong address is one
// clear line instead of endless retries.
func connect(ctx context.Context, target *redisTarget) (*redis.Client, error) {
	opt := *target.opt
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(&opt)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", target.shown, err)
	}
	return c, nil
}

// isTerminal reports whether w is a character device (colour is only used
// on a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// painter colours text when enabled.
type painter bool

func (p painter) paint(code, s string) string {
	if !p {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func (p painter) bold(s string) string  { return p.paint("1", s) }
func (p painter) green(s string) string { return p.paint("32", s) }
func (p painter) red(s string) string   { return p.paint("31", s) }
func (p painter) dim(s string) string   { return p.paint("2", s) }
