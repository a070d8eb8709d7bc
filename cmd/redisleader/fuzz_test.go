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
		// A password can occur in the rest of the URL by chance (a host
		// "redis", a port, "@" and the host): only check those that are not
		// in the URL with the password replaced.
		safe := scheme + "://" + user + ":" + hidden + "@" + rest
		if len(password) < 6 || strings.Contains(safe, password) || strings.Contains(safe, written) {
			t.Skip()
		}
		raw := scheme + "://" + user + ":" + written + "@" + rest
		check := func(what, out string) {
			if strings.Contains(out, password) || strings.Contains(out, written) {
				t.Fatalf("%s of %q shows the password %q: %q", what, raw, password, out)
			}
		}
		check("redactURL", redactURL(raw))
		target, err := parseRedisURL(raw, "--redis URL")
		if err != nil {
			check("the error", err.Error())
			return
		}
		if target.opt.Password != password {
			return // the URL split elsewhere: the password is not what we put
		}
		check("shown", target.shown)
		check("hide", target.hide("dial "+raw+": refused; password="+password+" written="+written))
		check("hide", commandLine([]string{"cmd", "--password", password}, target))
		if target.shown == "" {
			t.Fatalf("a URL that parses is shown as nothing: %q", raw)
		}
	})
}
