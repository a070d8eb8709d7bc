package readmecheck

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what the checks report.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func write(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCheckLinksFindsBrokenOnes: a missing file, a missing anchor and a
// guide the README does not link are each reported; good links, links in
// code, and links with a scheme are not.
func TestCheckLinksFindsBrokenOnes(t *testing.T) {
	dir := t.TempDir()
	guide := write(t, dir, "guide.md", "# A guide: `Run` (v2)\n\n## Twice\n\n## Twice\n\nSee [self](#twice-1), [up](readme.md#top).\n")
	other := write(t, dir, "other.md", "# Other\n")
	readme := write(t, dir, "readme.md", "# Top\n\n[g](guide.md#a-guide-run-v2) [x](https://example.com/#nope) "+
		"[gone](missing.md) [bad](guide.md#nope) `[code](nowhere.md)`\n\n```sh\n[block](nowhere.md)\n```\n")
	r := &recorder{TB: t}
	CheckLinks(r, readme, guide)
	CheckLinked(r, readme, guide, other)
	want := []string{`link "missing.md"`, `link "guide.md#nope"`, "does not link " + other}
	if len(r.errs) != len(want) {
		t.Fatalf("reported %q, want one report for each of %q", r.errs, want)
	}
	for i, w := range want {
		if !strings.Contains(r.errs[i], w) {
			t.Errorf("report %d is %q, want it to name %q", i, r.errs[i], w)
		}
	}
}

// TestAnchors: GitHub's rules, with repeats numbered.
func TestAnchors(t *testing.T) {
	got := Anchors("# Quick start: a lock\n## Fair mode: wedges (F1–F9)\n```\n# not a heading\n```\n## Fair mode: wedges (F1–F9)\n")
	want := []string{"quick-start-a-lock", "fair-mode-wedges-f1f9", "fair-mode-wedges-f1f9-1"}
	if !slices.Equal(got, want) {
		t.Errorf("Anchors = %q, want %q", got, want)
	}
}

// TestCheckGuidesFindsStrayCode: a guide whose first block is not an
// example, and a Go block that is not in example_test.go, are reported; a
// note named plain is not held to the first rule.
func TestCheckGuidesFindsStrayCode(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	write(t, dir, "example_test.go", "func ExampleX() {\n\tfmt.Println(1)\n}\n")
	if err := os.Mkdir("docs", 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, "docs", "good.md", "# Good\n\n```go\nfunc ExampleX() {\n\tfmt.Println(1)\n}\n```\n")
	write(t, "docs", "note.md", "# Note\n\n```sh\ngo test\n```\n")
	write(t, "docs", "bad.md", "# Bad\n\n```sh\ngo test\n```\n\n```go\nfmt.Println(2)\n```\n")
	r := &recorder{TB: t}
	CheckGuides(r, "docs", "note.md")
	if len(r.errs) != 2 || !strings.Contains(r.errs[0], "bad.md: code block is not in example_test.go") ||
		!strings.Contains(r.errs[1], "bad.md: a guide starts from a runnable example") {
		t.Errorf("reported %q, want bad.md's stray block and its first block", r.errs)
	}
}
