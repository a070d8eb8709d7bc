package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"unicode"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader"
)

// logger writes "redisleader: " status lines, one whole line at a time,
// with the Redis URLs and passwords hidden (a library warning, an error or
// the command line might hold them), and library option names replaced by
// the flags that set them. Lines below its level are left out.
type logger struct {
	mu     sync.Mutex
	w      io.Writer
	target hider
	level  logLevel // the zero value prints everything
}

// hider hides secrets in text: a *redisTarget or an *endpoint.
type hider interface{ hide(string) string }

// logLevel is how much run prints: errors always, warnings by default,
// every step with --verbose.
type logLevel int

const (
	levelInfo  logLevel = iota // --verbose
	levelWarn                  // default
	levelError                 // --quiet
)

func (l *logger) errorf(format string, a ...any) { l.logf(levelError, format, a...) }
func (l *logger) warnf(format string, a ...any)  { l.logf(levelWarn, format, a...) }
func (l *logger) infof(format string, a ...any)  { l.logf(levelInfo, format, a...) }

func (l *logger) logf(level logLevel, format string, a ...any) {
	if level < l.level {
		return
	}
	msg := fmt.Sprintf(format, a...)
	if l.target != nil {
		msg = l.target.hide(msg) // first: cliWords could change a password
	}
	// One line, each with the prefix, whatever the values hold (a joined
	// error has a newline; a value is anyone's string).
	msg = printable(strings.ReplaceAll(cliWords(msg), "\n", "; "))
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "redisleader: %s\n", msg)
}

// optionFlags names the run flag that sets each library option the CLI
// uses, for messages that name the option.
var optionFlags = map[string]string{"WithTTL": "--ttl", "WithTakeoverDelay": "--takeover-delay"}

var optionCall = regexp.MustCompile(`\b(With[A-Za-z]+)\(([^)]*)\)`)

// optionName matches a bare option name of optionFlags.
var optionName = regexp.MustCompile(`\b(WithTTL|WithTakeoverDelay)\b`)

// cliWords replaces "WithTTL(5s)" and "WithTakeoverDelay" in a library
// message with the flags that set them.
func cliWords(s string) string {
	s = optionCall.ReplaceAllStringFunc(s, func(m string) string {
		sub := optionCall.FindStringSubmatch(m)
		if f, ok := optionFlags[sub[1]]; ok {
			return f + " " + sub[2]
		}
		return m
	})
	return optionName.ReplaceAllStringFunc(s, func(opt string) string { return optionFlags[opt] })
}

// cliOptionError turns the library's "WithTTL(0s) must be at least 10ms"
// into "invalid --ttl 0s: must be at least 10ms".
func cliOptionError(err error) string {
	msg := trimPrefix(err)
	if m := optionCall.FindStringSubmatchIndex(msg); m != nil && m[0] == 0 {
		if f, ok := optionFlags[msg[m[2]:m[3]]]; ok {
			return "invalid " + f + " " + msg[m[4]:m[5]] + ": " + cliWords(strings.TrimSpace(msg[m[1]:]))
		}
	}
	return cliWords(msg)
}

// warnHandler prints the library's warnings (Redis errors while campaigning
// or renewing, retried meanwhile) as status lines. "lock lost" is left out:
// run says so itself, with what it does about it; so are attempts that
// failed because run cancelled them.
type warnHandler struct{ log *logger }

func (h warnHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h warnHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "redisleader: lock lost" {
		return nil
	}
	cancelled := false
	r.Attrs(func(a slog.Attr) bool {
		err, ok := a.Value.Any().(error)
		cancelled = ok && errors.Is(err, context.Canceled)
		return !cancelled
	})
	if cancelled { // an attempt that run itself ended (--try, a signal): not news
		return nil
	}
	var b strings.Builder
	b.WriteString(strings.TrimPrefix(r.Message, "redisleader: "))
	sep := " ("
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, "%s%s=%v", sep, a.Key, a.Value)
		sep = ", "
		return true
	})
	if sep == ", " {
		b.WriteByte(')')
	}
	h.log.warnf("%s", b.String())
	return nil
}

func (h warnHandler) WithAttrs([]slog.Attr) slog.Handler { return h } // the library uses none
func (h warnHandler) WithGroup(string) slog.Handler      { return h }

// trimPrefix is err's message without this package's "redisleader: " prefix,
// which the messages printed here carry already.
func trimPrefix(err error) string {
	return strings.TrimPrefix(err.Error(), "redisleader: ")
}

// checkOffline reports what NewSession, Session.Election and
// Election.Campaign would reject (a bad name, opts, value or copts) without
// any I/O, so that bad input is a usage error even when Redis is
// unreachable. None of them does I/O before its checks: Campaign, on the
// session closed first, checks its value and options, then returns
// ErrSessionClosed. what is "options", "name" or "campaign" (value or
// copts).
func checkOffline(name string, opts []redisleader.Option, value string, copts ...redisleader.CampaignOption) (what string, err error) {
	client := redis.NewClient(&redis.Options{}) // never used: nothing below does I/O
	defer client.Close()
	s, err := redisleader.NewSession(client, opts...)
	if err != nil {
		return "options", err
	}
	_ = s.Close(context.Background()) // it holds nothing: no I/O
	e, err := s.Election(name)
	if err != nil {
		return "name", err
	}
	if _, err := e.Campaign(context.Background(), value, copts...); errors.Is(err, redisleader.ErrInvalid) {
		return "campaign", err
	}
	return "", nil
}

// quietRedis silences go-redis's own global logger, which would otherwise
// print a "redis: ... pool.go: ... failed to dial" line for every retried
// dial around the one clear error these commands print, and on every pub/sub
// reconnect while watch waits for Redis to come back. The commands report
// what matters themselves.
func quietRedis() { redis.SetLogger(silentRedisLog{}) }

type silentRedisLog struct{}

func (silentRedisLog) Printf(context.Context, string, ...any) {}

// printable replaces control characters (a value is anyone's string) so that
// they cannot play tricks on a terminal.
func printable(s string) string {
	return strings.Map(func(c rune) rune {
		if unicode.IsGraphic(c) {
			return c
		}
		return '?'
	}, s)
}
