package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

const (
	defaultRedisURL = "redis://127.0.0.1:6379"
	redisURLForms   = "redis://[[user]:password@]host[:port][/db], rediss:// for TLS, or unix://[[user]:password@]/path[?db=N]"
	hidden          = "xxxxx" // what the CLI prints in place of a password
)

// redisURLFrom returns the URL the commands connect to without --redis:
// REDIS_URL, else the default; and what to call it in messages.
func redisURLFrom() (raw, source string) {
	if env := os.Getenv("REDIS_URL"); env != "" {
		return env, "REDIS_URL"
	}
	return defaultRedisURL, "default Redis URL"
}

// redisTarget is a parsed Redis URL. The URL as given is never printed: shown
// is its redacted form, and hide removes the URL and the password from any
// text that might hold them.
type redisTarget struct {
	opt     *redis.Options
	shown   string
	secrets *strings.Replacer // the URL and the password, with what replaces them
}

// hide returns s with the URL and its password hidden; t may be nil.
func (t *redisTarget) hide(s string) string {
	if t == nil {
		return s
	}
	return t.secrets.Replace(s)
}

// parseRedisURL parses raw, called source in messages. A malformed URL is an
// error whose message names the problem and shows the URL only redacted.
func parseRedisURL(raw, source string) (*redisTarget, error) {
	shown := redactURL(raw)
	opt, err := redis.ParseURL(raw)
	if err != nil {
		where := ""
		if shown != "" {
			where = " " + shown
		}
		return nil, fmt.Errorf("invalid %s%s: %s (want %s)", source, where, urlProblem(raw), redisURLForms)
	}
	// The URL as given, then the password as written in it (the user info
	// whole when it has no colon), where splitURL and where net/url find it
	// (they differ when the path holds an "@"), and as decoded.
	pairs := []string{raw, shown}
	_, splitInfo, _, _ := splitURL(raw)
	for _, secret := range []string{passwordIn(splitInfo), passwordIn(authorityUserinfo(raw)), opt.Password} {
		if secret != "" {
			pairs = append(pairs, secret, hidden)
		}
	}
	return &redisTarget{opt: opt, shown: shown, secrets: strings.NewReplacer(pairs...)}, nil
}

// splitURL cuts raw into its scheme (lower case), its user info and the
// rest, without parsing it, so that it works on URLs that do not parse: the
// user info is everything between "://" and the last "@", so that a
// password with unescaped special characters ("/", "?", "#", "@") is all in
// it. ok is false when raw does not start with redis://, rediss:// or
// unix://: then where the password is cannot be told.
func splitURL(raw string) (scheme, userinfo, rest string, ok bool) {
	scheme, rest, ok = strings.Cut(raw, "://")
	scheme = strings.ToLower(scheme)
	if !ok || (scheme != "redis" && scheme != "rediss" && scheme != "unix") {
		return "", "", "", false
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		userinfo, rest = rest[:at], rest[at+1:]
	}
	return scheme, userinfo, rest, true
}

// passwordIn is the password part of user info as written: after the first
// colon, or all of it when it has none.
func passwordIn(userinfo string) string {
	if _, password, ok := strings.Cut(userinfo, ":"); ok {
		return password
	}
	return userinfo
}

// authorityUserinfo is the user info of raw as net/url splits it: before the
// last "@" of the authority, which ends at the first "/", "?" or "#".
func authorityUserinfo(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return ""
	}
	return rest[:at]
}

// redactURL is raw as the CLI shows it, whether or not it parses: the
// password replaced by xxxxx, and the query left out (other clients take a
// password there). User info without a colon is hidden whole, since
// redis-cli takes it for a password. It returns "" when raw does not start
// with a Redis scheme, since then no part of it is known to be safe.
func redactURL(raw string) string {
	scheme, userinfo, rest, ok := splitURL(raw)
	if !ok {
		return ""
	}
	if user, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword && !strings.ContainsAny(user, "@/?#") {
		userinfo = user + ":" + hidden + "@"
	} else if userinfo != "" {
		userinfo = hidden + "@"
	}
	rest, _, _ = strings.Cut(rest, "?")
	rest, _, _ = strings.Cut(rest, "#")
	return printable(scheme + "://" + userinfo + rest)
}

// urlProblem says what is wrong with raw, which redis.ParseURL rejected.
// Its errors, and net/url's, quote the URL or parts of it, which may be the
// password: the problem is found by parsing raw without its user info, and
// only the cause is kept, without the URL.
func urlProblem(raw string) string {
	scheme, _, rest, ok := splitURL(raw)
	if !ok {
		return "not a redis://, rediss:// or unix:// URL"
	}
	_, err := redis.ParseURL(scheme + "://" + rest)
	if err == nil {
		return "bad user name or password: percent-encode their special characters (@ as %40, : as %3A, / as %2F, ? as %3F, # as %23, % as %25)"
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return printable(strings.TrimPrefix(err.Error(), "redis: "))
}
