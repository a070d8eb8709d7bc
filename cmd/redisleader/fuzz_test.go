package main

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzRedisURL builds a Redis URL around a fuzzed password and checks that
// nothing the CLI prints of it shows the password: neither redactURL's form,
// nor parseRedisURL's error for a malformed URL, nor what the parsed
// target's hide leaves of text that quotes the URL and the password. The
// password is put in as written (raw) and percent-encoded, so that both the
// URLs that parse and those that do not are covered.
func FuzzRedisURL(f *testing.F) {
	seeds := []struct{ scheme, user, password, rest string }{
		{"redis", "", "S3cr3t-Pw", "127.0.0.1:6379"},
		{"redis", "alice", "S3cr3t-Pw", "host:6379/1"},
		{"rediss", "alice", "S3cr3t-Pw/@:", "host:6380/0?dial_timeout=1s"},
		{"REDISS", "alice", "S3cr3t-Pw", "host"},
		{"unix", "alice", "S3cr3t-Pw", "/run/redis.sock?db=1"},
		{"redis", "user", "S3cr3t-Pw/?#", "127.0.0.1:6379"},
		{"redis", "user", "12/S3cr3t-Pw", "127.0.0.1:6379"},
		{"redis", "", "S3cr3t-Pw%zz", "127.0.0.1:6379"},
		{"redis", "", "S3cr3t-Pw", "127.0.0.1:badport/0"},
		{"redis", "", "S3cr3t-Pw", "127.0.0.1:6379/notadb"},
		{"rediss", "", "S3cr3t-Pw", "127.0.0.1/0/1"},
		{"http", "user", "S3cr3t-Pw", "127.0.0.1:6379"},
		{"redis", "", "S3cr3t-Pw", "127.0.0.1:6379\n"},
		{"unix", "user", "S3cr3t-Pw", "/tmp/redis.sock?db=x"},
		{"redis", "a@b", "S3cr3t-Pw", "host:1/0?name=a:b@c"},
		{"redis", "", `S3cr3t-Pw/@:%?# "`, "127.0.0.1:6379"},
	}
	for _, s := range seeds {
		f.Add(s.scheme, s.user, s.password, s.rest, false)
		f.Add(s.scheme, s.user, s.password, s.rest, true)
	}
	f.Fuzz(func(t *testing.T, scheme, user, password, rest string, encode bool) {
		written := password
		if encode {
			written = url.PathEscape(password)
		}
		if len(password) < 6 || strings.Contains(password, "\n") {
			t.Skip() // short ones occur by chance; the probes below are lines
		}
		raw := scheme + "://" + user + ":" + written + "@" + rest
		// safe is the same URL with the password replaced: what it shows
		// of a password (a host "redis", "@" and the host, a port) is there
		// by chance, not a leak. Each check compares with it.
		safe := scheme + "://" + user + ":" + hidden + "@" + rest
		shows := func(out string) bool {
			return strings.Contains(out, password) || strings.Contains(out, written)
		}
		check := func(what, out, outSafe string) {
			t.Helper()
			if shows(out) && !shows(outSafe) && !shows(safe) && !shows(strings.ToLower(safe)) {
				t.Fatalf("%s of %q shows the password %q: %q", what, raw, password, out)
			}
		}
		check("redactURL", redactURL(raw), redactURL(safe))
		target, err := parseRedisURL(raw, "--redis URL")
		if err != nil {
			errSafe := ""
			if _, e := parseRedisURL(safe, "--redis URL"); e != nil {
				errSafe = e.Error()
			}
			check("the error", err.Error(), errSafe)
			return
		}
		if target.opt.Password != password {
			return // the URL split elsewhere: the password is not what we put
		}
		if target.shown == "" {
			t.Fatalf("a URL that parses is shown as nothing: %q", raw)
		}
		check("shown", target.shown, redactURL(safe))
		probe := strings.Join([]string{"dial", raw, "password", password, "written", written}, "\n")
		ideal := strings.Join([]string{"dial", redactURL(safe), "password", hidden, "written", hidden}, "\n")
		check("hide", target.hide(probe), ideal)
		check("commandLine", commandLine([]string{"cmd", "--password", password}, target), "cmd --password "+hidden)
	})
}
