package redisgocron

import (
	"testing"

	"github.com/redisleader/redisleader/internal/readmecheck"
)

// TestReadmeMatchesExamples: every Go code block in README.md appears,
// character for character, in example_test.go, where it is compiled.
func TestReadmeMatchesExamples(t *testing.T) { readmecheck.Check(t) }
