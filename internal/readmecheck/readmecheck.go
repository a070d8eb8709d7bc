// Package readmecheck keeps a module's documentation honest. Every Go code
// block in its README (Check) and in its guides (CheckGuides) must appear,
// character for character, in example_test.go, where it is compiled and its
// output checked, and each guide starts from such an example. Every relative
// link and anchor must resolve (CheckLinks), and every guide must be linked
// from the README (CheckLinked). The root module and the adapter modules
// share it.
package readmecheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	goBlock    = regexp.MustCompile("(?s)```go\n(.*?)```")
	anyBlock   = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
	link       = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
	scheme     = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
)

// Check fails t unless every Go code block of README.md in the current
// directory appears verbatim in example_test.go, and there is at least one.
func Check(t testing.TB) {
	t.Helper()
	examples := read(t, "example_test.go")
	blocks := goBlock.FindAllStringSubmatch(read(t, "README.md"), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go code blocks")
	}
	checkBlocks(t, "README.md", blocks, examples)
}

// CheckGuides fails t unless every Go code block of the markdown files in
// dir appears verbatim in example_test.go, and each of them but the ones
// named in plain (notes and reference pages) starts from a whole example
// function: its first code block is a Go block that begins with
// "func Example".
func CheckGuides(t testing.TB, dir string, plain ...string) {
	t.Helper()
	examples := read(t, "example_test.go")
	files, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no markdown files in %s (%v)", dir, err)
	}
	for _, f := range files {
		text := read(t, f)
		checkBlocks(t, f, goBlock.FindAllStringSubmatch(text, -1), examples)
		if slices.Contains(plain, filepath.Base(f)) {
			continue
		}
		first := anyBlock.FindStringSubmatch(text)
		if first == nil || first[1] != "go" || !strings.HasPrefix(first[2], "func Example") {
			t.Errorf("%s: a guide starts from a runnable example: its first code block must be a whole Example function from example_test.go", f)
		}
	}
}

func checkBlocks(t testing.TB, file string, blocks [][]string, examples string) {
	t.Helper()
	for _, b := range blocks {
		if !strings.Contains(examples, b[1]) {
			t.Errorf("%s: code block is not in example_test.go (they must be identical):\n%s", file, b[1])
		}
	}
}

// CheckLinks fails t unless every relative link in the given markdown files
// (outside code) names a file or folder that exists, and every #anchor in
// one names a heading of the markdown file it points to (GitHub's anchors).
// Links with a scheme (https:, mailto:) are not followed.
func CheckLinks(t testing.TB, files ...string) {
	t.Helper()
	for _, f := range files {
		for _, target := range links(read(t, f)) {
			if err := resolve(f, target); err != "" {
				t.Errorf("%s: link %q: %s", f, target, err)
			}
		}
	}
}

// CheckLinked fails t unless the markdown file from links every one of
// files (paths as given, relative to the current directory).
func CheckLinked(t testing.TB, from string, files ...string) {
	t.Helper()
	linked := map[string]bool{}
	for _, target := range links(read(t, from)) {
		path, _, _ := strings.Cut(target, "#")
		linked[filepath.Clean(filepath.Join(filepath.Dir(from), path))] = true
	}
	for _, f := range files {
		if !linked[filepath.Clean(f)] {
			t.Errorf("%s does not link %s: every guide must be one click from it", from, f)
		}
	}
}

// links returns the targets of the relative links in markdown text, code
// blocks and code spans left out.
func links(text string) []string {
	text = inlineCode.ReplaceAllString(anyBlock.ReplaceAllString(text, ""), "")
	var out []string
	for _, m := range link.FindAllStringSubmatch(text, -1) {
		if !scheme.MatchString(m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// resolve says what is wrong with target, a link in file, or "".
func resolve(file, target string) string {
	path, anchor, hasAnchor := strings.Cut(target, "#")
	dest := file
	if path != "" {
		dest = filepath.Join(filepath.Dir(file), path)
		if _, err := os.Stat(dest); err != nil {
			return "no such file or folder " + dest
		}
	}
	if !hasAnchor || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	text, err := os.ReadFile(dest)
	if err != nil {
		return err.Error()
	}
	if !slices.Contains(Anchors(string(text)), anchor) {
		return "no heading in " + dest + " has the anchor #" + anchor
	}
	return ""
}

// Anchors returns the anchors GitHub gives the headings of markdown text:
// lower case, letters, digits, '-' and '_' kept, spaces turned into '-',
// everything else dropped, and "-1", "-2", ... added to repeats.
func Anchors(text string) []string {
	text = anyBlock.ReplaceAllString(text, "")
	seen := map[string]int{}
	var out []string
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		out = append(out, a)
	}
	return out
}

func read(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
