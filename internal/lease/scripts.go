// Package lease is the floor that owns what Redis holds for a name: the
// key layout, every script (lua/*.lua, embedded), and the shapes of their
// arguments and replies. It knows nothing of sessions or deadlines.
package lease

import (
	"embed"
	"strings"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// A Script is one Lua script as Redis runs it: its source and the hex
// SHA-1 of that source (EVALSHA's digest).
type Script struct {
	Name string
	Src  string
	SHA  string
}

// The scripts, and the pieces each is made of: lua/prelude.lua first, then
// the fragments named, then the script's own file (its name), which holds
// its contract (KEYS, ARGV, replies, order of writes). A fragment defines
// functions only, and takes what it needs as parameters or from KEYS and
// ARGV as its header says.
//
// The SHAs are written out, not computed: hashing at start-up panics under
// GODEBUG=fips140=only (SHA-1 is not FIPS 140 approved), which regulated
// users run. TestScriptSHAs checks each and prints the right one for a
// script that changed; a wrong one would make every call fall back to
// EVAL, costing a round trip.
var (
	Acquire          = build("acquire", "0baddf5727e7f973c143a0de935ae8fb87c10eba", "fence", "take", "claim")
	AcquireCandidate = build("acquire_candidate", "65f77277e782f6fc50010390eeba8d4026a52a37", "fence", "take", "cand", "claim")
	Renew            = build("renew", "7e4ef256d5b50d8a2bd40a0b35937357fb3cf685")
	Release          = build("release", "b01a21dfdecbd90fa8908a6edab3f8d981967388")
	Proclaim         = build("proclaim", "494ed535d128bef31b7e5ce1c8e9549527dbd2bf", "own")
	Inspect          = build("inspect", "f6367af37233613f1fc6ded6f5a831fd8b294159")
	FairAcquire      = build("fair_acquire", "52a94b79c025baccb1241fcf258d893d8de43fa8", "fence", "take", "queue", "cand")
	Leave            = build("leave", "6b10f34b5a74e4d1f96c72ddba15e1063f686156", "queue")
	FairRelease      = build("fair_release", "a8efd6ef791a68e9e2a96beca9cbfce4914ba42c", "queue")
	Withdraw         = build("withdraw", "eb5a6a5c62552102139c8a7cd2abae0d1aee9a0b")
	PreferRenew      = build("prefer_renew", "36fc22526df99480e9b3896d6ef7c256f2cc4846", "cand")
	Candidates       = build("candidates", "57e467f74f860e63e15b5692926c1a91482e01ce", "cand")
	HandOff          = build("hand_off", "e581048992efadf34a51bdd7f0dc7c1f5094a894", "queue", "cand")
	RedlockRenew     = build("redlock_renew", "ce9ecb8824c979ef7281b3753da5554fb87c9cdd", "fence", "own")
	RedlockRelease   = build("redlock_release", "6ebb97bfd442b0d833db2a8910d24126f55cd382", "fence")
	Fenced           = build("fenced", "198b87f8f9092d1e4b0a4a8efd5760378acf0e78")
)

// All lists every script build made, for TestScriptSHAs.
var All []*Script

// build assembles the script name from the prelude, the fragments and its
// own file, with sha as its SHA-1.
func build(name, sha string, fragments ...string) *Script {
	var b strings.Builder
	for _, f := range append(append([]string{"prelude"}, fragments...), name) {
		b.WriteString(piece(f))
	}
	s := &Script{Name: name, Src: b.String(), SHA: sha}
	All = append(All, s)
	return s
}

// piece is lua/<name>.lua without its comment lines: a comment is for the
// reader of the file, and would only lengthen what EVAL sends.
func piece(name string) string {
	raw, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("lease: " + err.Error())
	}
	var b strings.Builder
	for line := range strings.Lines(string(raw)) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return b.String()
}
