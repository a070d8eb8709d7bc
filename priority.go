package redisleader

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisleader/redisleader/internal/wire"
)

// Preferred candidates (WithPriority; the model is in doc.go, section
// Choosing the leader).
//
// A candidate that declares a priority is enlisted in two sorted sets in the
// name's slot: the candidates (member: its value → priority) and their
// leases (member → end, server ms). Every acquire attempt of the candidate
// enlists it again (the attempt a follower makes anyway: no command of its
// own) until its next attempt can have come, plus its TTL: a follower
// attempts within its TTL or, waiting for the holder, once the holder's
// lease can have expired, which the attempt reads (PTTL), so an entry
// outlives its candidate's own TTL when the leader's is longer. The
// leader's renewal enlists it for one TTL (a leader that dies leaves with
// its lease), and returns the best live candidate above its priority. The
// leader's Run then yields to it (ErrPreempted), once its term has lasted
// its minimum term, and its release hands the name to the best candidate
// above it (handOffScript in transfer.go). An entry whose lease passed is
// skipped and pruned; one left by a candidate that died lives until its
// next attempt would have come, plus a TTL, and a hand-over to it costs one
// reservation (a TTL), never an overlap, and takes it out of the candidates.
//
// The lease is the fact and the candidates a hint: a leader's renewal that
// Redis refuses for its candidate keys (TRYAGAIN while a Cluster slot
// migrates with the keys split between two nodes, or a value someone else
// wrote in a candidate key) renews the lease alone at once
// (renewLeasesAlone), so a leader with a priority keeps every lease a plain
// leader keeps. Every other script that needs the candidates fails, before
// any write, with an error that names the foreign key (candidateKeys).

// A CampaignOption sets how a candidate campaigns (Election.Campaign and
// Election.Run). Options are created by WithPriority and WithMinTerm; the
// set is sealed (CampaignOption cannot be implemented outside the package).
// Campaign and Run validate the combined options and report the first
// broken rule.
type CampaignOption interface {
	applyCampaign(*candidacy)
}

type campaignOption func(*candidacy)

func (f campaignOption) applyCampaign(c *candidacy) { f(c) }

// maxPriority bounds a priority: Redis keeps it in a sorted set's score, a
// double, exact up to 2^53.
const maxPriority = 1<<53 - 1

// WithPriority declares the candidate's priority p, in [-(2^53-1), 2^53-1]
// (a version, a zone rank): a leader yields to a live candidate with a
// strictly higher one (WithMinTerm says when), and hands the name to the
// best such candidate when it releases it. Equal priorities never move
// leadership. Candidates are told apart by their values: a candidate with
// a priority needs a non-empty one (ErrInvalid otherwise).
func WithPriority(p int64) CampaignOption {
	return campaignOption(func(c *candidacy) { c.priority, c.prioritised = p, true })
}

// NeverYield, given to WithMinTerm, is a minimum term that never passes: a
// leader with a priority keeps leading whatever candidate waits; it still
// hands the name to the best candidate above it when it releases it.
const NeverYield time.Duration = math.MaxInt64

// WithMinTerm sets how long a leader with a priority leads before it yields
// to a better candidate (hysteresis against flapping; default 0: as soon as
// its renewal finds one), or NeverYield; it must not be negative. Only Run
// yields: onElected's context ends with cause ErrPreempted, and once
// onElected has returned Run hands the name over and campaigns again. It
// requires WithPriority.
func WithMinTerm(d time.Duration) CampaignOption {
	return campaignOption(func(c *candidacy) { c.minTerm, c.minTermSet = d, true })
}

// candidacy is a candidate's declared priority and yield policy, shared by
// every acquisition of one Campaign or Run.
type candidacy struct {
	priority    int64
	prioritised bool
	minTerm     time.Duration // NeverYield: never
	minTermSet  bool
	prioArg     any // priority, boxed once
	candKeys    [2]any
}

// candidacyOf applies opts for value's campaign in an election of k and
// validates them, the one place that does; it returns nil without a
// priority, and an error matching ErrInvalid when they break a rule or the
// session is a Redlock one.
func (s *Session) candidacyOf(k keys, value string, opts []CampaignOption) (*candidacy, error) {
	if len(opts) == 0 {
		return nil, nil
	}
	c := &candidacy{}
	for _, o := range opts {
		if o == nil {
			return nil, invalidf("campaign option must not be nil")
		}
		o.applyCampaign(c)
	}
	if err := c.validate(); err != nil || !c.prioritised {
		return nil, err
	}
	if _, redlock := s.place.(*quorum); redlock {
		return nil, invalidf("priorities are not supported with Redlock (a reservation or a candidate list on a majority of nodes is not one fact)")
	}
	if value == "" {
		return nil, invalidf("a candidate with a priority needs a value: candidates are told apart by their values")
	}
	c.prioArg = strconv.FormatInt(c.priority, 10)
	c.candKeys = [2]any{k.candidates(), k.candidateLeases()}
	return c, nil
}

// validate reports the first rule that the options break.
func (c *candidacy) validate() error {
	switch {
	case c.priority > maxPriority || c.priority < -maxPriority:
		return invalidf("priority %d is out of range: it must be within ±(2^53-1), exact in a Redis sorted set's score", c.priority)
	case c.minTerm < 0:
		return invalidf("minimum term %v must not be negative (NeverYield: never yield)", c.minTerm)
	case !c.prioritised && c.minTermSet:
		return invalidf("WithMinTerm needs WithPriority")
	}
	return nil
}

// withCandidate returns an acquire script's argument vector argv {_, _,
// numkeys, keys..., args...} with the candidate's two keys after the others
// and its priority last.
func (c *candidacy) withCandidate(argv []any) []any {
	n := argv[2].(int)
	out := make([]any, 0, len(argv)+3)
	out = append(out, argv[:3+n]...)
	out[2] = n + 2
	out = append(out, c.candKeys[:]...)
	out = append(out, argv[3+n:]...)
	return append(out, c.prioArg)
}

// withdraw takes a candidate that gives up out of the candidates, best
// effort (an entry left behind lives until the candidate's next attempt
// would have come, plus a TTL), so that no leader hands the name to it.
func (a *acquisition) withdraw(ctx context.Context) {
	s, c, value := a.s, a.cand, a.value // not a: the closure would move every acquisition to the heap
	s.bestEffortCleanup(ctx, func(ctx context.Context) {
		_ = s.wire.Combiner().Call(ctx, time.Time{}, withdrawScript, []any{nil, nil, 2, c.candKeys[0], c.candKeys[1], value})
	})
}

// withdrawScript takes a candidate out of the candidates.
//
//	KEYS[1] candidates, KEYS[2] their leases
//	ARGV[1] value
//
// Replies the number of entries removed.
var withdrawScript = wire.NewScript("f92ccf8b73802bb11fb6a49e9d68bdb7d4db2104", guarded(`
return call('ZREM', KEYS[1], ARGV[1]) + call('ZREM', KEYS[2], ARGV[1])
`))

// succession is what a leadership's release does besides the delete: hand
// the name to a named successor (Transfer), or to the best candidate above
// the leader (a priority). The Lock's mu guards its pointer (Transfer sets
// it on a lock without a priority) and every field but cand.
type succession struct {
	cand    *candidacy // nil: no priority declared
	heir    string     // Transfer's successor, "" if none
	preempt func()     // Run's: ends onElected with ErrPreempted; nil once run
}

// candidate returns l's candidacy, or nil.
func (l *Lock) candidate() *candidacy {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.candidateLocked()
}

func (l *Lock) candidateLocked() *candidacy {
	if l.succ == nil {
		return nil
	}
	return l.succ.cand
}

// onPreempt arranges for f to run, once, when a better candidate waits and
// l's minimum term has passed (preferred).
func (l *Lock) onPreempt(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.candidateLocked() != nil {
		l.succ.preempt = f
	}
}

// preferred is told by the heartbeat that a live candidate with a higher
// priority waits: it preempts l's Run term if the policy lets it now.
func (l *Lock) preferred() {
	l.mu.Lock()
	var f func()
	// NeverYield's minimum term never passes.
	if c := l.candidateLocked(); c != nil && l.succ.preempt != nil &&
		l.delivered && time.Since(hookEpoch)-l.deliveredAt >= c.minTerm {
		f, l.succ.preempt = l.succ.preempt, nil
	}
	l.mu.Unlock()
	if f != nil {
		l.s.cfg.logger.Info("redisleader: a candidate with a higher priority waits; yielding", "election", l.keys.name, "fence", l.fence)
		f()
	}
}

// renewCall is the renewal of l: a candidate's also enlists it and reports
// the best candidate above it.
func (s *Session) renewCall(l *Lock) wire.Call {
	if c := l.candidate(); c != nil {
		return wire.Call{Script: preferRenewScript, Argv: []any{nil, nil, 3, l.lockArg, c.candKeys[0], c.candKeys[1],
			l.tokenArg, s.ttlArg, l.argv[argValue], c.prioArg}}
	}
	return s.leaseCall(l)
}

// leaseCall renews l's lease alone: the lock key, nothing else.
func (s *Session) leaseCall(l *Lock) wire.Call {
	return wire.Call{Script: renewScript, Argv: []any{nil, nil, 1, l.lockArg, l.tokenArg, s.ttlArg}}
}

// renewLeasesAlone sends again, in one more round trip, as leaseCall, the
// renewals among calls (whose replies are cmds, of locks) that Redis
// refused for their candidate keys (candidateKeysRefused), and puts the
// new replies in cmds. The lease is the fact and the candidates a hint: a
// leader with a priority keeps every lease a plain leader keeps; enlisting
// it and hearing of a better candidate wait for a later renewal.
func (s *Session) renewLeasesAlone(ctx context.Context, c Client, locks []*Lock, calls []wire.Call, cmds []*redis.Cmd) {
	var again []int
	for i, cl := range calls {
		if cl.Script != preferRenewScript || !candidateKeysRefused(cmds[i].Err()) {
			continue
		}
		level := slog.LevelInfo // a slot in migration
		if redis.HasErrorPrefix(cmds[i].Err(), "redisleader:") {
			level = slog.LevelWarn // someone else's data, to be removed
		}
		s.cfg.logger.Log(ctx, level, "redisleader: renewing the lease alone: the candidate keys refused the renewal",
			"name", locks[i].keys.name, "fence", locks[i].fence, "err", cmds[i].Err())
		again = append(again, i)
	}
	if len(again) == 0 {
		return
	}
	leases := make([]wire.Call, len(again))
	for j, i := range again {
		leases[j] = s.leaseCall(locks[i])
	}
	replies, ackErr := wire.RunCalls(ctx, c, leases, s.cfg.acks, nil)
	for j, i := range again {
		if ackErr != nil && replies[j].Err() == nil {
			replies[j].SetErr(ackErr) // not acknowledged: it does not count
		}
		cmds[i] = replies[j]
	}
}

// candidateKeysRefused reports whether a renewal's error can be about its
// candidate keys, not its lease: on Redis Cluster, while their slot
// migrates, a call with several keys that are split between the two nodes
// gets TRYAGAIN, or ASK once the client gave up following redirections
// (the lock key alone is served, through an ASK redirection); or a value
// someone else wrote in a candidate key (candidateKeys in luaCand).
func candidateKeysRefused(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "ASK ") ||
		redis.HasErrorPrefix(err, "redisleader: candidate key "))
}

// argValue is the slot of the value in Lock.argv (the acquire script's
// ARGV[3]): the value the candidate campaigned with.
const argValue = 7

// luaCand is Lua for the scripts that enlist a candidate with a priority
// (the acquire scripts, preferRenewScript) or pick one (handOffScript,
// candidatesScript). ARGV[3] is the candidate's value; its priority is the
// last ARGV, a decimal string (never turned into a Lua number, which keeps
// 14 digits when it becomes a string again).
//
//	candidateKeys(ck, lk)  reads: raises an error, before any write, when
//	                the candidates ck or their leases lk hold anything but
//	                a sorted set (someone else wrote it), which names the
//	                key and says what to do; the key is left unchanged. It
//	                reads with ZSCORE (not TYPE: the ACL rule has no TYPE),
//	                under its own pcall, so that WRONGTYPE becomes that
//	                error; any other error goes on as it came (see guarded)
//	enlisting(i)    before any write: KEYS[i] and KEYS[i+1], if given, are
//	                the candidates and their leases (candidateKeys)
//	enlist(t, leads, wait)  after the writes, given TIME's reply t: enlists
//	                the candidate until its next attempt can have come, plus
//	                a TTL (ARGV[2]): a follower's next attempt comes within a
//	                TTL or, waiting for the holder, once the holder's lease
//	                can have expired (wait, its PTTL in ms); one TTL when it
//	                leads (its renewals keep it; it dies with its lease). It
//	                prunes up to 16 passed entries, and has both keys expire
//	                with the latest lease
//	live(e, now)    whether a lease end e (a score, or nil) is live at now:
//	                passed, or further than two of the longest TTLs (48 h:
//	                not ours, a forged one) is not
//	best(ck, lk, now, above, skip)  the live candidate with the highest
//	                priority above the decimal above, other than skip and
//	                other than "" (nil if none among the best 16)
const luaCand = `local candKeys
local far = 2 * 86400000
local function live(e, now)
  e = tonumber(e)
  return e ~= nil and e > now and e <= now + far
end
local function candidateKeys(ck, lk)
  for _, k in ipairs({ck, lk}) do
    local ok, e = pcall(call, 'ZSCORE', k, '')
    if not ok then
      if string.sub(type(e) == 'table' and e.err or tostring(e), 1, 9) ~= 'WRONGTYPE' then error(e, 0) end
      cmd = nil
      error('redisleader: candidate key ' .. k .. ' holds a value this package did not write (not a sorted set); it was left unchanged: delete it to campaign with a priority', 0)
    end
  end
end
local function enlisting(i)
  if not KEYS[i + 1] then return end
  candKeys = {KEYS[i], KEYS[i + 1]}
  candidateKeys(KEYS[i], KEYS[i + 1])
end
local function enlist(t, leads, wait)
  if not candKeys then return end
  local ck, lk = candKeys[1], candKeys[2]
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local passed = call('ZRANGEBYSCORE', lk, '-inf', string.format('%.0f', now), 'LIMIT', 0, 16)
  local forged = call('ZRANGEBYSCORE', lk, string.format('(%.0f', now + far), '+inf', 'LIMIT', 0, 16)
  for _, m in ipairs(forged) do passed[#passed + 1] = m end
  if #passed > 0 then
    call('ZREM', ck, unpack(passed))
    call('ZREM', lk, unpack(passed))
  end
  local ttl = tonumber(ARGV[2])
  local ends = now + ttl
  if not leads then ends = ends + math.min(math.max(ttl, tonumber(wait) or 0), far / 2) end
  call('ZADD', ck, ARGV[#ARGV], ARGV[3])
  call('ZADD', lk, string.format('%.0f', ends), ARGV[3])
  local top = call('ZRANGE', lk, -1, -1, 'WITHSCORES')
  if top[2] and live(top[2], now) and tonumber(top[2]) > ends then ends = tonumber(top[2]) end
  call('PEXPIREAT', ck, string.format('%.0f', ends))
  call('PEXPIREAT', lk, string.format('%.0f', ends))
end
local function best(ck, lk, now, above, skip)
  local c = call('ZRANGE', ck, '+inf', '(' .. above, 'BYSCORE', 'REV', 'LIMIT', 0, 16)
  for _, m in ipairs(c) do
    if m ~= skip and m ~= '' and live(call('ZSCORE', lk, m), now) then return m end
  end
  return nil
end
`

// preferRenewScript is renewScript for a leader with a priority: it also
// enlists the leader and reports the best live candidate above it.
//
//	KEYS[1] lock key, KEYS[2] candidates, KEYS[3] their leases
//	ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] value, ARGV[4] priority
//
// Replies 0 if the key is missing or holds another token (then it writes
// nothing); 1 if renewed; {1, value} if renewed and the candidate with
// value has a higher priority. Order: GET, the candidate reads, TIME,
// PEXPIRE, then enlist.
var preferRenewScript = wire.NewScript("5075b7b9df390b2e5723d6a7b19bfd7ba91622e2", guarded(luaCand+`
local cur = call('GET', KEYS[1])
if not ours(cur) then return 0 end
enlisting(2)
local t = call('TIME')
local better = best(KEYS[2], KEYS[3], t[1] * 1000 + math.floor(t[2] / 1000), ARGV[4], ARGV[3])
call('PEXPIRE', KEYS[1], ARGV[2])
enlist(t, true)
if better then return {1, better} end
return 1
`))

// A Candidate is a live candidate that declared a priority (WithPriority).
type Candidate struct {
	Value    string
	Priority int64
}

// Candidates returns the live candidates of the election that declared a
// priority, the leader among them if it did, best first (up to 100), with
// one Redis call. Like Leader's, the answer may be stale when it is used.
// It returns ErrInvalid on a Redlock session.
func (e *Election) Candidates(ctx context.Context) ([]Candidate, error) {
	n, ok := e.s.place.(*node)
	if !ok {
		return nil, invalidf("Candidates: priorities are not supported with Redlock")
	}
	res, err := n.s.wire.Combiner().Call(ctx, time.Time{}, candidatesScript,
		[]any{nil, nil, 2, e.keys.candidates(), e.keys.candidateLeases()}).Slice()
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("redisleader: candidates of %q: %w", e.keys.name, err)
	}
	out := make([]Candidate, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		v, _ := res[i].(string)
		p, _ := strconv.ParseInt(fmt.Sprint(res[i+1]), 10, 64)
		out = append(out, Candidate{Value: v, Priority: p})
	}
	return out, nil
}

// candidatesScript reads the live candidates, best first.
//
//	KEYS[1] candidates, KEYS[2] their leases
//
// Replies {value, priority, ...} for up to 100 live candidates. It writes
// nothing.
var candidatesScript = wire.NewScript("fd620a14c647def3c91b82e21b8cc8cb70b5393b", guarded(luaCand+`
candidateKeys(KEYS[1], KEYS[2])
local t = call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local c = call('ZRANGE', KEYS[1], 0, 99, 'REV', 'WITHSCORES')
local out = {}
for i = 1, #c, 2 do
  if live(call('ZSCORE', KEYS[2], c[i]), now) then
    out[#out + 1] = c[i]
    out[#out + 1] = string.format('%.0f', tonumber(c[i + 1]))
  end
end
return out
`))
