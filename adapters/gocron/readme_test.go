package redisgocron

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeMatchesExamples: every Go code block in README.md appears,
// character for character, in example_test.go, where it is compiled.
func TestReadmeMatchesExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	examples, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go code blocks")
	}
	for _, b := range blocks {
		if !strings.Contains(string(examples), b[1]) {
			t.Errorf("README.md code block is not in example_test.go (they must be identical):\n%s", b[1])
		}
	}
}
