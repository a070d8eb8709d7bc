package main

import (
	"flag"
	"io"
	"testing"
)

// TestReportFile: a partial run (-only) prints its report and leaves
// RESULTS.md, the full run's, alone unless -out names a file.
func TestReportFile(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "RESULTS.md"},
		{[]string{"-out", "x.md"}, "x.md"},
		{[]string{"-only", "locks"}, ""},
		{[]string{"-only", "locks", "-out", "locks.md"}, "locks.md"},
		{[]string{"-only", "locks", "-out", "RESULTS.md"}, "RESULTS.md"},
	} {
		flags := flag.NewFlagSet("bench", flag.ContinueOnError)
		flags.SetOutput(io.Discard)
		out := flags.String("out", "RESULTS.md", "")
		only := flags.String("only", "", "")
		if err := flags.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := reportFile(flags, *out, *only); got != c.want {
			t.Errorf("%q: report written to %q, want %q", c.args, got, c.want)
		}
	}
}
