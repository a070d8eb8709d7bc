package redisgocron

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxNameLen is redisleader's limit on a name, in bytes.
const maxNameLen = 512

// hashMark separates a truncated key from its hash. An escaped key never
// contains it: escape writes '%' only as the start of a %XX escape.
const hashMark = "%~"

// hashLen is the length of the hex SHA-256 of the key appended to long keys.
const hashLen = 2 * sha256.Size

// LockName returns the redisleader lock name used for the gocron key under
// prefix: prefix followed by key, where every byte of '%', '{', '}', invalid
// UTF-8 and every rune that is not printable (control and format characters,
// spaces other than ' ') is written as %XX, so the name is valid UTF-8 with
// no braces and no control characters. If that would be longer than 512
// bytes, the escaped key is cut (never inside a rune or an escape) and
// "%~" plus the hex SHA-256 of the whole key is appended. The mapping is
// deterministic and injective for a given prefix: distinct keys give distinct
// names (up to SHA-256 collisions for long keys), and every scheduler that
// uses the same prefix maps a key to the same name.
func LockName(prefix, key string) string {
	var b strings.Builder
	b.WriteString(prefix)
	if n := len(prefix) + escapedLen(key); n <= maxNameLen && n > 0 {
		escape(&b, key, n-len(prefix))
		return b.String()
	}
	// Too long (or empty): a readable head, then the hash of the whole key.
	budget := maxNameLen - len(prefix) - len(hashMark) - hashLen
	escape(&b, key, budget)
	sum := sha256.Sum256([]byte(key))
	b.WriteString(hashMark)
	b.WriteString(hex.EncodeToString(sum[:]))
	return b.String()
}

// keep reports whether r (decoded from size bytes) is written as itself.
func keep(r rune, size int) bool {
	if r == utf8.RuneError && size <= 1 {
		return false // invalid UTF-8
	}
	return r != '%' && r != '{' && r != '}' && unicode.IsPrint(r)
}

// escapedLen is the length of key once escaped.
func escapedLen(key string) int {
	n := 0
	for i := 0; i < len(key); {
		r, size := utf8.DecodeRuneInString(key[i:])
		if keep(r, size) {
			n += size
		} else {
			n += 3 * size
		}
		i += size
	}
	return n
}

// escape writes key escaped to b, stopping before the first rune whose
// escaped form would take it past budget bytes.
func escape(b *strings.Builder, key string, budget int) {
	used := 0
	for i := 0; i < len(key); {
		r, size := utf8.DecodeRuneInString(key[i:])
		out := key[i : i+size]
		if !keep(r, size) {
			var e strings.Builder
			for j := range size {
				fmt.Fprintf(&e, "%%%02X", key[i+j])
			}
			out = e.String()
		}
		if used+len(out) > budget {
			return
		}
		b.WriteString(out)
		used += len(out)
		i += size
	}
}

// checkPrefix applies redisleader's naming rules to a prefix, leaving room
// for the hashed form of any key.
func checkPrefix(prefix string) error {
	switch {
	case len(prefix) > maxNameLen-len(hashMark)-hashLen:
		return fmt.Errorf("redisgocron: prefix is %d bytes long; it must be at most %d", len(prefix), maxNameLen-len(hashMark)-hashLen)
	case !utf8.ValidString(prefix):
		return fmt.Errorf("redisgocron: prefix %q must be valid UTF-8", prefix)
	case strings.ContainsAny(prefix, "{}"):
		return fmt.Errorf("redisgocron: prefix %q must not contain '{' or '}'", prefix)
	case strings.IndexFunc(prefix, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("redisgocron: prefix %q must contain only printable characters", prefix)
	}
	return nil
}
