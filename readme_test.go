package redisleader

import (
	"path/filepath"
	"testing"

	"github.com/redisleader/redisleader/internal/readmecheck"
)

// TestReadmeMatchesExamples: every Go code block in README.md appears,
// character for character, in example_test.go, where it is compiled.
func TestReadmeMatchesExamples(t *testing.T) { readmecheck.Check(t) }

// notes are the pages of docs/ that are not guides a user arrives at with a
// question: the evidence and mechanism notes, and the pages whose runnable
// examples are commands (performance: the bench run; architecture: tests).
var notes = []string{"RELIABILITY.md", "MECHANISMS.md", "SERVERS.md", "performance.md", "architecture.md"}

// TestGuidesMatchExamples: every Go code block in docs/*.md appears,
// character for character, in example_test.go, and every guide starts
// from a whole example function.
func TestGuidesMatchExamples(t *testing.T) { readmecheck.CheckGuides(t, "docs", notes...) }

// TestDocLinks: every relative link and #anchor in README.md, docs/*.md and
// the adapters' READMEs resolves, and the README links every page of docs/.
func TestDocLinks(t *testing.T) {
	docs, err := filepath.Glob("docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md (%v)", err)
	}
	adapters, err := filepath.Glob("adapters/*/README.md")
	if err != nil || len(adapters) == 0 {
		t.Fatalf("no adapters/*/README.md (%v)", err)
	}
	readmecheck.CheckLinks(t, append(append([]string{"README.md"}, docs...), adapters...)...)
	readmecheck.CheckLinked(t, "README.md", docs...)
}
