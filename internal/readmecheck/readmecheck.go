// Package readmecheck keeps a module's README honest: every Go code block in
// it must appear, character for character, in example_test.go, where it is
// compiled and its output checked. The root module and the adapter modules
// share it.
package readmecheck

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// Check fails t unless every Go code block of README.md in the current
// directory appears verbatim in example_test.go, and there is at least one.
func Check(t testing.TB) {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	examples, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlock.FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go code blocks")
	}
	for _, b := range blocks {
		if !strings.Contains(string(examples), b[1]) {
			t.Errorf("README.md code block is not in example_test.go (they must be identical):\n%s", b[1])
		}
	}
}
