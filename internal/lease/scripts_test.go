package lease

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

// Every script's written-out SHA is the SHA-1 of its source, so EVALSHA
// finds the script that EVAL loaded (Redis caches scripts by that digest).
func TestScriptSHAs(t *testing.T) {
	if len(All) != 24 { // the request, semaphore and read-write lock scripts joined the table
		t.Errorf("%d scripts built, want 24", len(All))
	}
	for _, s := range All {
		sum := sha1.Sum([]byte(s.Src))
		if want := hex.EncodeToString(sum[:]); s.SHA != want {
			t.Errorf("script %s has the SHA-1 %q: put that in its build call in scripts.go", s.Name, want)
		}
	}
}
