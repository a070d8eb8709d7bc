package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
)

// The demo runs on the embedded Redis in the test suite, and its timeline
// must show the election, the graceful handover and the crash takeover, in
// that order, with the crashed leader stepping down before the next one is
// elected.
func TestDemo(t *testing.T) {
	var out, errOut bytes.Buffer
	code := cmdDemo(context.Background(), []string{"--ttl", "500ms"}, &out, &errOut)
	t.Log("\n" + out.String())
	if code != exitOK {
		t.Fatalf("demo exited %d: %s", code, errOut.String())
	}
	if errOut.Len() != 0 {
		t.Errorf("demo wrote to stderr: %s", errOut.String())
	}
	text := out.String()
	if strings.Contains(text, "\x1b[") {
		t.Error("colour codes in output that is not a terminal")
	}
	order := []string{
		"campaigns",
		"elected leader (fence ",
		"resigns (graceful handover)",
		"took over ",
		"crashes: its connections to Redis are cut",
		"stepped down at its local deadline",
		"elected leader (fence ",
		"after the crash (the dead leader's lease had to expire)",
		"Summary",
		"(strictly increasing across leaders)",
		"safety:            the crashed leader stepped down ",
		"an observer saw:   (none) → ",
	}
	rest := text
	for _, want := range order {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("demo output lacks %q after the previous step", want)
		}
		rest = rest[i+len(want):]
	}
	if n := strings.Count(text, "elected leader (fence "); n != 3 {
		t.Errorf("want 3 elections (first, after the handover, after the crash), got %d", n)
	}
	// Three leaders with a vacancy between each two.
	m := regexp.MustCompile(`an observer saw: +(.*)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("no observer line")
	}
	seen := strings.Split(m[1], " → ")
	var leaders []string
	for i, s := range seen {
		if s == "(none)" {
			continue
		}
		leaders = append(leaders, s)
		if i == 0 || seen[i-1] != "(none)" {
			t.Errorf("no vacancy before %s in %q", s, m[1])
		}
	}
	if len(leaders) != 3 {
		t.Errorf("observer saw %d leaders, want 3: %q", len(leaders), m[1])
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--candidates", "1"}, {"--candidates", "11"}, {"extra"}, {"--nope"}} {
		var out, errOut bytes.Buffer
		if code := cmdDemo(context.Background(), args, &out, &errOut); code != exitUsage {
			t.Errorf("demo %v: exit %d, want %d", args, code, exitUsage)
		}
		if errOut.Len() == 0 {
			t.Errorf("demo %v: no message on stderr", args)
		}
	}
}
