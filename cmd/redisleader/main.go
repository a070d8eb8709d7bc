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
// TLS, with user and password in the URL), default redis://127.0.0.1:6379.
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

const defaultRedisURL = "redis://127.0.0.1:6379"

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

Redis: --redis URL or REDIS_URL (redis://[user:pass@]host:port[/db], rediss:// for TLS);
default redis://127.0.0.1:6379. Run "redisleader COMMAND --help" for a command's flags.
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

// redisURLFlag registers --redis with REDIS_URL as its default.
func redisURLFlag(fs *flag.FlagSet) *string {
	def := os.Getenv("REDIS_URL")
	if def == "" {
		def = defaultRedisURL
	}
	return fs.String("redis", def, "Redis URL (env REDIS_URL): redis://[user:pass@]host:port[/db], rediss:// for TLS")
}

// connect parses url, makes a client with the options this library
// recommends, and checks that Redis answers, so that a wrong address is one
// clear line instead of endless retries.
func connect(ctx context.Context, url string) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("bad Redis URL %q: %w", url, err)
	}
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", redactURL(opt), err)
	}
	return c, nil
}

// redactURL shows where we connect without the password.
func redactURL(opt *redis.Options) string {
	scheme := "redis"
	if opt.TLSConfig != nil {
		scheme = "rediss"
	}
	user := ""
	if opt.Username != "" {
		user = opt.Username + "@"
	}
	return fmt.Sprintf("%s://%s%s/%d", scheme, user, opt.Addr, opt.DB)
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
