package lease

import "strconv"

// Arguments. A script call's argument vector is {command, SHA or source,
// numkeys, KEYS..., ARGV...}: the runner fills the first two slots. Every
// script of ours has the lock key as KEYS[1], which the combiner orders
// calls by, and the scripts that take a fence key have it as KEYS[2]. The
// builders here and in plain.go are the only place that knows each
// script's slots; they take values boxed once (an any made once per lock,
// not per call), so that a call costs no allocation it need not.

// Candidate are a candidate's arguments, boxed once: its two keys and its
// priority (a decimal string).
type Candidate struct {
	Keys  [2]any
	Prio  any
	Value any
}

// MaxPriority bounds a priority: Redis keeps it in a sorted set's score, a
// double, exact up to 2^53.
const MaxPriority = 1<<53 - 1

// NewCandidate boxes the arguments of value's candidacy in k's election with
// priority prio (passed as a decimal).
func NewCandidate(k Keys, value string, prio int64) Candidate {
	return Candidate{Keys: [2]any{k.Candidates, k.CandidateLeases}, Prio: strconv.FormatInt(prio, 10), Value: value}
}

// Enlist returns an acquire vector argv (acquire's or fair_acquire's) with
// the candidate's two keys after its keys and its priority last, as
// acquire_candidate and fair_acquire take them.
func (c Candidate) Enlist(argv []any) []any {
	n := argv[2].(int)
	out := make([]any, 0, len(argv)+3)
	out = append(out, argv[:3+n]...)
	out[2] = n + 2
	out = append(out, c.Keys[:]...)
	out = append(out, argv[3+n:]...)
	return append(out, c.Prio)
}

// Fair are a fair acquisition's own arguments: its place's member id, and
// whether it joins the queue ("1") or never does ("0"), boxed once.
type Fair struct {
	Queue, Leases, ID, Join any
}

// NewFair boxes the arguments of waiter id's fair acquisition of k.
func NewFair(k Keys, id string, join bool) Fair {
	j := "0"
	if join {
		j = "1"
	}
	return Fair{Queue: k.Queue, Leases: k.Leases, ID: id, Join: j}
}

// FairAcquire fills buf with fair_acquire's vector and returns it.
func (a *Args) FairAcquire(buf *[12]any, f *Fair) []any {
	*buf = [12]any{nil, nil, 4, a.Lock, a.Fence, f.Queue, f.Leases, a.Token, a.TTL, a.Value, f.ID, f.Join}
	return buf[:]
}

// Leave is leave's vector for f's waiter of the lock key lock.
func (f *Fair) Leave(lock, ttl any) []any {
	return []any{nil, nil, 3, lock, f.Queue, f.Leases, f.ID, ttl}
}

// PreferRenew is prefer_renew's vector for c.
func (a *Args) PreferRenew(c *Candidate) []any {
	return []any{nil, nil, 3, a.Lock, c.Keys[0], c.Keys[1], a.Token, a.TTL, a.Value, c.Prio}
}

// FairRelease is fair_release's vector for k's queue.
func (a *Args) FairRelease(k Keys) []any {
	return []any{nil, nil, 3, a.Lock, k.Queue, k.Leases, a.Token}
}

// Proclaim is proclaim's vector for the seq'th Proclaim of the term, of
// value, with the term's seq key.
func (a *Args) Proclaim(seqKey string, seq int64, value string) []any {
	return []any{nil, nil, 2, a.Lock, seqKey, a.Token, seq, value}
}

// RedlockRenew is redlock_renew's vector with the acquisition's fence.
func (a *Args) RedlockRenew(fence int64) []any {
	return []any{nil, nil, 2, a.Lock, a.Fence, a.Token, a.TTL, fence}
}

// RedlockRelease fills buf with redlock_release's vector and returns it.
func (a *Args) RedlockRelease(buf *[7]any, fence int64) []any {
	*buf = [7]any{nil, nil, 2, a.Lock, a.Fence, a.Token, fence}
	return buf[:]
}

// withdrawArgs is withdraw's vector for c.
func (c *Candidate) withdrawArgs() []any { return []any{nil, nil, 2, c.Keys[0], c.Keys[1], c.Value} }

// CandidatesArgs is candidates' vector for k's election.
func CandidatesArgs(k Keys) []any { return []any{nil, nil, 2, k.Candidates, k.CandidateLeases} }

// FencedSetArgs and FencedDelArgs are fenced's vectors for the user's key.
func FencedSetArgs(key string, fence int64, value string) []any {
	return []any{nil, nil, 1, key, fence, value}
}
func FencedDelArgs(key string, fence int64) []any { return []any{nil, nil, 1, key, fence} }
