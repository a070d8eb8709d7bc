// Command redisleader runs leader elections on Redis from the shell: a demo
// on an embedded Redis, a command that runs on exactly one host at a time,
// and who leads now.
//
//	redisleader demo                               # embedded Redis, nothing to install
//	redisleader run --name NAME -- COMMAND [ARGS]  # run COMMAND only while leader
//	redisleader run --name NAME --try --hold 1m -- JOB  # a cron job, once per tick
//	redisleader run --slots N NAME -- COMMAND      # at most N COMMANDs at once
//	redisleader status [--check] NAME              # who leads (or holds permits) now
//	redisleader watch [--json] NAME                # one line per leader change
//	redisleader transfer NAME --to VALUE           # hand leadership to VALUE
//	redisleader completion bash|zsh|fish           # completion script
//	redisleader version
//
// The Redis address comes from --redis or REDIS_URL (redis://, rediss:// for
// TLS, unix:// for a socket, with user and password in the URL), default
// redis://127.0.0.1:6379; --sentinel-master and --cluster take several
// --redis URLs. Special characters in the password must be percent-encoded;
// --password-file and REDISCLI_AUTH keep it out of the command line. The
// commands never print the password: they show the URL as
// redis://user:xxxxx@host:port, and a malformed URL is a usage error (exit
// status 2) that shows only that redacted form.
//
// The flags are the standard library's: the command lives in the library's
// module, whose importers should not inherit a dependency only it needs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"
)

// Exit codes shared by the commands.
const (
	exitOK    = 0
	exitError = 1 // Redis unreachable, Redis errors, bad state
	exitUsage = 2 // bad flags or arguments
)

func main() {
	if superviseArg != "" && len(os.Args) > 1 && os.Args[1] == superviseArg {
		os.Exit(supervise(os.Args[2:])) // run's supervisor of COMMAND (Linux)
	}
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// stopSignals end status, watch and demo, and are forwarded by run: SIGHUP
// (the terminal closed) and SIGQUIT are handled like SIGINT and SIGTERM.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// catchSignals relays the stopSignals to c, except those ignored when
// redisleader started, which it keeps ignored, for itself and for COMMAND
// (nohup(1) ignores SIGHUP; a non-interactive shell ignores SIGINT and
// SIGQUIT in what it starts with "&"): signal.Notify would un-ignore them.
func catchSignals(c chan<- os.Signal) {
	var caught []os.Signal
	for _, s := range stopSignals {
		if ignoredAtStart(s) {
			signal.Ignore(s)
			continue
		}
		caught = append(caught, s)
	}
	if len(caught) > 0 { // Notify with none would catch all
		signal.Notify(c, caught...)
	}
}

// ignoredAtStart reports whether sig was ignored when redisleader started.
// The Go runtime keeps an inherited SIG_IGN only for SIGHUP and SIGINT; it
// installs its own handler for SIGQUIT before main runs, and the disposition
// it replaced cannot be read back. So SIGQUIT follows SIGINT, as the shells
// set them: both ignored (a script's "&"), or neither. SIGTERM is always
// caught.
func ignoredAtStart(sig os.Signal) bool {
	if sig == syscall.SIGQUIT {
		sig = os.Interrupt
	}
	return signal.Ignored(sig)
}

// stoppedBy is the cause of the context of status, watch and demo when a
// stop signal ended it.
type stoppedBy struct{ sig os.Signal }

func (s stoppedBy) Error() string { return "received " + s.sig.String() }

// interrupted returns the exit status 128+n if a stop signal n ended ctx,
// or -1.
func interrupted(ctx context.Context) int {
	var s stoppedBy
	if errors.As(context.Cause(ctx), &s) {
		if n, ok := s.sig.(syscall.Signal); ok {
			return 128 + int(n)
		}
	}
	return -1
}

// runMain dispatches to a command and returns the process exit code.
func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	// Signals are caught from here on, before anything can block (reading
	// --password-file, connecting), so that none is lost: run routes them
	// itself; the other commands end with ctx.
	sigs := make(chan os.Signal, 4)
	catchSignals(sigs)
	defer signal.Stop(sigs)
	if args[0] == "run" {
		return cmdRun(args[1:], sigs, stdout, stderr)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		select {
		case sig := <-sigs:
			cancel(stoppedBy{sig})
		case <-ctx.Done():
		}
	}()
	switch args[0] {
	case "demo":
		return cmdDemo(ctx, args[1:], stdout, stderr)
	case "status":
		return cmdStatus(ctx, args[1:], stdout, stderr)
	case "watch":
		return cmdWatch(ctx, args[1:], stdout, stderr)
	case "transfer":
		return cmdTransfer(ctx, args[1:], stdout, stderr)
	case "completion":
		return cmdCompletion(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version())
		return exitOK
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "redisleader: unknown command %q (see redisleader --help)\n", printable(args[0]))
		return exitUsage
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `redisleader: leader election on Redis.

Usage:
  redisleader run --name NAME [flags] -- COMMAND [ARGS] run COMMAND only while this process leads NAME
  redisleader run --slots N [flags] NAME -- COMMAND     run COMMAND while holding one of N permits of NAME
  redisleader status [--json] [--check] NAME            print who leads NAME (or holds its permits) now
  redisleader watch [--json] NAME                       print one line per leader change of NAME
  redisleader transfer NAME --to VALUE                  make the run that leads NAME hand it over to VALUE
  redisleader demo [--redis URL]                        show elections at work (embedded Redis by default)
  redisleader completion bash|zsh|fish                  print a shell completion script
  redisleader version                                   print the version (also --version)

Redis: --redis URL or REDIS_URL (redis://[user:pass@]host:port[/db], rediss:// for TLS,
unix://[user:pass@]/path[?db=N]; percent-encode special characters in the password);
default redis://127.0.0.1:6379. The password may also come from --password-file or
REDISCLI_AUTH. It is never printed: URLs are shown as redis://user:xxxxx@host:port.
Run "redisleader COMMAND --help" for a command's flags and exit statuses.
`)
}

// version is the module's version and VCS revision from the build info.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "redisleader (unknown version: built without module support)"
	}
	v := "redisleader " + bi.Main.Version
	var extra []string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			extra = append(extra, "commit "+s.Value)
		case "vcs.time":
			extra = append(extra, s.Value)
		case "vcs.modified":
			if s.Value == "true" {
				extra = append(extra, "modified")
			}
		}
	}
	if len(extra) > 0 {
		v += " (" + strings.Join(extra, ", ") + ")"
	}
	return v + " " + bi.GoVersion
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

// newFlagSet makes a flag set that prints nothing itself: parseFlags prints
// the help (to stdout) or the one-line error (to stderr).
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// helpText is what "redisleader CMD --help" prints.
type helpText struct {
	synopsis string // after "Usage: redisleader "
	about    string // what the command does
	exit     string // its exit statuses
}

// parseFlags parses args and returns the exit code to use if parsing ended
// the command, or -1 to go on: on --help it prints the help to stdout (exit
// 0); on a bad flag, one line to stderr (exit 2).
func parseFlags(fs *flag.FlagSet, h helpText, args []string, stdout, stderr io.Writer) int {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return -1
	case errors.Is(err, flag.ErrHelp):
		printHelp(stdout, fs, h)
		return exitOK
	}
	return usageError(stderr, fs.Name(), "%s", flagError(err))
}

// usageError prints a usage error on one line, with where to find help, and
// returns exitUsage.
func usageError(stderr io.Writer, cmd, format string, a ...any) int {
	fmt.Fprintf(stderr, "redisleader %s: %s (see redisleader %s --help)\n", cmd, fmt.Sprintf(format, a...), cmd)
	return exitUsage
}

var singleDashFlag = regexp.MustCompile(`(^|[\s:])-([A-Za-z][\w-]*)`)

// flagError is the flag package's error with flags written as --name, on
// one printable line.
func flagError(err error) string {
	return printable(singleDashFlag.ReplaceAllString(err.Error(), "$1--$2"))
}

// printHelp prints a command's synopsis, description, flags (as --name) and
// exit statuses.
func printHelp(w io.Writer, fs *flag.FlagSet, h helpText) {
	fmt.Fprintf(w, "Usage: redisleader %s\n%s\nFlags:\n", h.synopsis, h.about)
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if kind != "" {
			line += " " + kind
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch f.DefValue {
		case "", "false", "0", "0s":
		default:
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
	fmt.Fprint(w, h.exit)
}

// colour decides whether to colour what goes to w: only on a terminal, and
// not when NO_COLOR is set (https://no-color.org) or TERM is dumb.
func colour(w io.Writer) painter {
	return painter(wantColour(isTerminal(w), os.Getenv("NO_COLOR"), os.Getenv("TERM")))
}

func wantColour(terminal bool, noColor, term string) bool {
	return terminal && noColor == "" && term != "dumb"
}
