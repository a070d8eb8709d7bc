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

// An acquire script's reply is one integer when it took the lock with
// TIME's fence (the fence and the time its TTL runs from are that number),
// or an array; anything else is an error, never a lock taken.
func TestDecodeAcquireForms(t *testing.T) {
	const us = int64(1765100000123456)
	for _, tt := range []struct {
		reply any
		want  Acquired
	}{
		{us, Acquired{Taken: true, Fence: us, At: us}},
		{[]any{int64(1), us + 1, us}, Acquired{Taken: true, Fence: us + 1, At: us}},
		{[]any{int64(0), "tok\n7\nv", int64(900)}, Acquired{Fence: 7, PTTL: 900, By: "v", Ahead: -1}},
	} {
		got, err := DecodeAcquire(tt.reply)
		if err != nil || got != tt.want {
			t.Errorf("DecodeAcquire(%v) = %+v, %v; want %+v", tt.reply, got, err, tt.want)
		}
	}
	for _, bad := range []any{nil, "OK", []any{int64(1)}} {
		if got, err := DecodeAcquire(bad); err == nil || got.Taken {
			t.Errorf("DecodeAcquire(%#v) = %+v, %v; want an error", bad, got, err)
		}
	}
}
