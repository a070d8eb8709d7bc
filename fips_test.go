package redisleader

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redisleader/redisleader/internal/redisserver"
	"github.com/redisleader/redisleader/internal/wire"
)

// Under GODEBUG=fips140=only a program that imports the package starts, and
// takes and releases a lock on a real Redis: nothing the package or go-redis
// does on that path (at start-up or per call) uses an algorithm FIPS 140
// does not approve, such as SHA-1 for the scripts' EVALSHA digests.
// The tests do not run in that mode (TestScriptSHAs computes SHA-1s), so
// this one builds testdata/fipsprobe and runs it. A program that failed
// would panic at start-up: "crypto/sha1: use of SHA-1 is not allowed in
// FIPS 140-only mode".
func TestFIPS140Only(t *testing.T) {
	srv := redisserver.Start(t)
	bin := filepath.Join(t.TempDir(), "fipsprobe")
	build := exec.Command("go", "build", "-o", bin, "./testdata/fipsprobe")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/fipsprobe: %v\n%s", err, out)
	}
	probe := exec.Command(bin, srv.Addr())
	probe.Env = append(os.Environ(), "GODEBUG=fips140=only")
	out, err := probe.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("TryLock and Release under GODEBUG=fips140=only: %v\n%s", err, out)
	}
}

// Every script's SHA constant is the SHA-1 of its source, so EVALSHA finds
// the script that EVAL loaded (Redis caches scripts by that digest).
func TestScriptSHAs(t *testing.T) {
	scripts := wire.Scripts()
	if len(scripts) < 5 {
		t.Fatalf("%d scripts registered, want at least acquire, renew, release, inspect and raise", len(scripts))
	}
	for _, s := range scripts {
		src := s.Src()
		sum := sha1.Sum([]byte(src))
		if want := hex.EncodeToString(sum[:]); s.SHA() != want {
			t.Errorf("the script with SHA constant %q has the SHA-1 %q: put that in its wire.NewScript call\n%s", s.SHA(), want, src)
		}
	}
}
