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

// The scripts, and the pieces each is made of: lua/prelude.lua's base first,
// then the prelude's pieces named, then the script's own file (its name), which holds
// its contract (KEYS, ARGV, replies, order of writes). A fragment defines
// functions only, and takes what it needs as parameters or from KEYS and
// ARGV as its header says. The default mode's scripts (acquire, release,
// renew) are lean: they call redis.pcall and hand its errors to the
// prelude's deny; every other script names guard first, whose one pcall
// and call wrapper note which command failed (see lua/prelude.lua).
//
// The SHAs are written out, not computed: hashing at start-up panics under
// GODEBUG=fips140=only (SHA-1 is not FIPS 140 approved), which regulated
// users run. TestScriptSHAs checks each and prints the right one for a
// script that changed; a wrong one would make every call fall back to
// EVAL, costing a round trip.
var (
	Acquire          = build("acquire", "b68dcfea96b2ac0f12f4a9cf8e545c921d79c102", "fence", "take", "claim")
	AcquireCandidate = build("acquire_candidate", "2c3524e6d71e23c9d9ee49ca7c2a8036dda28ca6", "guard", "fence", "take", "cand", "claim")
	Renew            = build("renew", "05af59ddf0ef94ff9ec87c1e5b1e6fd3a7519940", "mine")
	Release          = build("release", "ca8c93ef28ba7119b23df93a5d4defc09140db3b", "mine")
	Proclaim         = build("proclaim", "49a39db809375e747b38dfbb91c2303f45a6458a", "guard", "own")
	Inspect          = build("inspect", "5e5430a4e49a8c7d1c2f628361877fb5537045ad", "guard")
	FairAcquire      = build("fair_acquire", "1d4d31867d9cbf0f8b18e4b2db68ebc7bf7ac988", "guard", "fence", "take", "queue", "cand")
	Leave            = build("leave", "201cf76da33cda5ee1ca64981f87e640a4b6ce08", "guard", "queue")
	FairRelease      = build("fair_release", "a2a18ab10432ec0c1cd7ef22261d84cdd45cfdf7", "guard", "queue")
	Withdraw         = build("withdraw", "eb55c763b4f634bcbaca733f3b02e68e717fd7c1", "guard")
	PreferRenew      = build("prefer_renew", "f161320047a001f0fcfafe084842afc6ca4086c6", "guard", "cand")
	Candidates       = build("candidates", "140bc24c0208ac39230c6832b2801cdfb1b06630", "guard", "cand")
	HandOff          = build("hand_off", "9d78473afa2c925b6b4aa8023de9a1ebd763c309", "guard", "queue", "cand")
	RedlockRenew     = build("redlock_renew", "e3014474a00ecd3c281d8bf8850c158dbb32a6fd", "guard", "fence", "readfence", "own")
	RedlockRelease   = build("redlock_release", "10b95dcde7cf28b51bec854a3278b53fab724f67", "guard", "fence", "readfence")
	Fenced           = build("fenced", "885b09c4dfbe97d0ca4510d52e94dca1d3873bee", "guard")
	RequestSend      = build("request_send", "5d40a7f95299060408ab1813f755cbd18c3864da", "guard")
	RequestTake      = build("request_take", "19df0db248ecd7f7755dedec66e0a6e018c2bd36", "guard")
	SemAcquire       = build("sem_acquire", "27411a4ac5da5f89f623600b0ad5908cc1d806b0", "guard", "typed", "fence", "readfence")
	SemRenew         = build("sem_renew", "ea5935adc0383a0f338337602d8371833ee129b2", "guard")
	SemRelease       = build("sem_release", "98bf3ff9482c494035e1f9064cbfc89e6c3e6350", "guard")
	SemHolders       = build("sem_holders", "2e1093c6107ccadd867fe2874d4101c0d0ff91db", "guard")
	SemLimit         = build("sem_limit", "4b2635c24a563adf9ae8ecdf8e99b0a701739d12", "guard", "typed")
	RWAcquire        = build("rw_acquire", "dd58bf9b71248faa609df3cca7bde9c50d5873c1", "guard", "typed", "fence", "readfence")
)

// All lists every script build made, for TestScriptSHAs.
var All []*Script

// build assembles the script name from the prelude's base, the prelude's
// pieces named (fragments) and its own file, with sha as its SHA-1.
func build(name, sha string, fragments ...string) *Script {
	var b strings.Builder
	b.WriteString(prelude[""])
	for _, f := range fragments {
		p, ok := prelude[f]
		if !ok {
			panic("lease: lua/prelude.lua has no piece " + f)
		}
		b.WriteString(p)
	}
	b.WriteString(code(lua("lua/" + name + ".lua")))
	s := &Script{Name: name, Src: b.String(), SHA: sha}
	All = append(All, s)
	return s
}

// pieceMark starts a piece of lua/prelude.lua: "-- ==== piece NAME ====".
const pieceMark = "-- ==== piece "

// prelude is lua/prelude.lua cut into its pieces, without comment lines:
// "" is its base (what every script starts with), then one entry per
// piece, which a script takes only if the table above names it, so that no
// script pays server time for definitions it does not call.
var prelude = func() map[string]string {
	pieces := map[string]string{}
	name, body := "", ""
	for line := range strings.Lines(lua("lua/prelude.lua")) {
		if rest, ok := strings.CutPrefix(line, pieceMark); ok {
			pieces[name] += code(body)
			name, body = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "====")), ""
			continue
		}
		body += line
	}
	pieces[name] += code(body)
	return pieces
}()

// lua reads an embedded file.
func lua(path string) string {
	raw, err := luaFiles.ReadFile(path)
	if err != nil {
		panic("lease: " + err.Error())
	}
	return string(raw)
}

// code is Lua text without its comment lines: a comment is for the reader
// of the file, and would only lengthen what EVAL sends.
func code(text string) string {
	var b strings.Builder
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return b.String()
}
