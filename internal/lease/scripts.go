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
	Acquire          = build("acquire", "c065ca771391dfe9b4c3197807afd72bd0d31e57", "fence", "take", "claim")
	AcquireCandidate = build("acquire_candidate", "307452e19c9b6d807e07b3fc15b1e4f13337671e", "guard", "fence", "take", "live", "cand", "claim")
	Renew            = build("renew", "14b38c98ab88c48e651fa29662f6c058063335e6", "mine")
	Release          = build("release", "47e7552dd5c852043f161285258d5c378573113e", "mine")
	Proclaim         = build("proclaim", "48f0719ec3028f3e7cb72754730bee8f639064f3", "guard", "own")
	Inspect          = build("inspect", "0d78bc3f09bd47308fd89428867b70172292b1b9", "guard")
	FairAcquire      = build("fair_acquire", "a2953ae8dbf8f48cbf46149de1e542c087a5476e", "guard", "fence", "take", "live", "queue", "cand")
	Leave            = build("leave", "9a28f99e1484854b098cfb79870dda6378ec6357", "guard", "live", "queue")
	FairRelease      = build("fair_release", "93bb85999cf3a18c99d2ca8450e2752d0cbec62b", "guard", "live", "queue")
	Withdraw         = build("withdraw", "e2669a045508f3e50e78347771532d505302e2b3", "guard")
	PreferRenew      = build("prefer_renew", "03cf65607f019d7fe0bfa45a6966ed61453b7335", "guard", "live", "cand")
	Candidates       = build("candidates", "b34119d80c107d39d890c91dd5602cb666e47072", "guard", "live", "cand")
	HandOff          = build("hand_off", "c31c42c83a58c796d573a5ffa8238e11a59a1f71", "guard", "live", "queue", "cand")
	RedlockRenew     = build("redlock_renew", "b4ca5fcde9236400acafd3c7016068aa93c75ff5", "guard", "fence", "readfence", "own")
	RedlockRelease   = build("redlock_release", "c8aeefba418d51b0ca2e0c799d3882119af68c9b", "guard", "fence", "readfence")
	Fenced           = build("fenced", "f7727356d15e13659ee07e528c812f48a80a86af", "guard")
	RequestSend      = build("request_send", "655d047c4b7e5e368898cfac67258c1b9c148736", "guard")
	RequestTake      = build("request_take", "556a4e9f176d1e8ab5417528e2483379aa72c290", "guard")
	SemAcquire       = build("sem_acquire", "15313a9ff0bbe5f9ef8ebfb4cf27273c96072b9c", "guard", "typed", "fence", "readfence")
	SemRenew         = build("sem_renew", "a6db79f73ae2947a8ef2b6dc7f7cf4b241467101", "guard", "live")
	SemRelease       = build("sem_release", "fa1ab2e32bfa4b997a2f10bcc9411d3fe5ee92a1", "guard")
	SemHolders       = build("sem_holders", "66826630dcd5392856045227f2dda9250cfd1e96", "guard")
	SemLimit         = build("sem_limit", "90b5ab8866136c3a621466849a4591c8ba07f40b", "guard", "typed")
	RWAcquire        = build("rw_acquire", "2475727b521dd1f71c49d0212aaf9495129c84e1", "guard", "typed", "fence", "readfence")
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
