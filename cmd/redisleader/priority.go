package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redisleader/redisleader"
)

// Priorities (the library's WithPriority and WithMinTerm; doc.go, section
// Choosing the leader): run --priority campaigns with Election.Run, whose
// term ends with cause ErrPreempted when a candidate with a higher priority
// waits; run then stops COMMAND as on any end of leadership, Run hands the
// name to that candidate once COMMAND has exited, and run campaigns again.
// status and watch show the live candidates and which one is preferred.

// priorityFlag is --priority: an integer, or not given.
type priorityFlag struct {
	p   int64
	set bool
}

func (f *priorityFlag) String() string {
	if !f.set {
		return ""
	}
	return strconv.FormatInt(f.p, 10)
}

func (f *priorityFlag) Set(s string) error {
	p, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("want an integer")
	}
	f.p, f.set = p, true
	return nil
}

// minTermFlag is --min-term: a duration that is not negative, "never"
// (redisleader.NeverYield), or not given. A negative duration is refused
// here, as a usage error (the library refuses it too).
type minTermFlag struct {
	d   time.Duration
	set bool
}

func (f *minTermFlag) String() string {
	switch {
	case !f.set:
		return ""
	case f.d == redisleader.NeverYield:
		return "never"
	}
	return f.d.String()
}

func (f *minTermFlag) Set(s string) error {
	if s == "never" {
		f.d, f.set = redisleader.NeverYield, true
		return nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return errors.New("want a duration such as 30s, or never")
	case d < 0:
		return errors.New("must not be negative (never: never yield)")
	}
	f.d, f.set = d, true
	return nil
}

// optionalFlag is a flag with no default value.
type optionalFlag interface {
	Set(string) error
	given() bool
}

func (f *priorityFlag) given() bool { return f.set }
func (f *minTermFlag) given() bool  { return f.set }

// fromEnv sets v from the environment variable env unless the flag called
// name was given, and returns what gave v its value: "--name", "$env", or ""
// for neither.
func fromEnv(v optionalFlag, name, env string) (source string, err error) {
	if v.given() {
		return "--" + name, nil
	}
	s := os.Getenv(env)
	if s == "" {
		return "", nil
	}
	if err := v.Set(s); err != nil {
		return "", fmt.Errorf("invalid $%s %q: %v", env, printable(s), err)
	}
	return "$" + env, nil
}

// campaignOptions are the options of run's campaign that --priority and
// --min-term, or their environment variables, set (none without a
// priority), and what set the priority (for messages); msg says what is
// wrong with them, except what the library checks (checkOffline).
func (f *runFlags) campaignOptions() (copts []redisleader.CampaignOption, prio, msg string) {
	if f.slots.set { // a permit has no priority: the variables do not apply (slots.go)
		return nil, "", ""
	}
	prio, err := fromEnv(&f.priority, "priority", envPriority)
	if err != nil {
		return nil, "", err.Error()
	}
	minTerm, err := fromEnv(&f.minTerm, "min-term", envMinTerm)
	switch {
	case err != nil:
		return nil, "", err.Error()
	case prio == "" && minTerm != "":
		return nil, "", minTerm + " needs --priority (or $" + envPriority + ")"
	case prio == "":
		return nil, "", ""
	case f.try || f.wait > 0:
		return nil, "", prio + " excludes --try and --wait: a candidate with a priority campaigns until it leads"
	}
	copts = []redisleader.CampaignOption{redisleader.WithPriority(f.priority.p)}
	if minTerm != "" {
		copts = append(copts, redisleader.WithMinTerm(f.minTerm.d))
	}
	return copts, prio, ""
}

// preference is who is preferred to lead: the live candidates with a
// priority, best first (Election.Candidates), the one the leader yields to
// or keeps leading as (preferred), and the leader among them.
type preference struct {
	cands     []redisleader.Candidate // nil: not readable (the Redis user may not)
	preferred int                     // index in cands; -1 without candidates
	leader    int                     // index in cands; -1 if the leader is not one
}

// preferenceOf says who is preferred among cands when leader leads (Fence
// 0: nobody): the best candidate, or the leader if none is above it, since
// equal priorities never move leadership.
func preferenceOf(cands []redisleader.Candidate, leader redisleader.Leader) preference {
	p := preference{cands: cands, preferred: -1, leader: -1}
	if len(cands) == 0 {
		return p
	}
	p.preferred = 0
	for i, c := range cands {
		if leader.Fence != 0 && c.Value == leader.Value {
			p.leader = i
			if c.Priority == cands[0].Priority {
				p.preferred = i
			}
		}
	}
	return p
}

// describe is what status and watch say after "leader VALUE (fence N" (or
// after "no leader"), given the end of that parenthesis: the leader's
// priority and whether it is preferred, or which candidate is.
func (p preference) describe(closing string) string {
	switch {
	case p.preferred < 0:
		return closing
	case p.leader == p.preferred:
		return fmt.Sprintf(", priority %d, preferred%s", p.cands[p.leader].Priority, closing)
	}
	var b strings.Builder
	if p.leader >= 0 {
		fmt.Fprintf(&b, ", priority %d", p.cands[p.leader].Priority)
	}
	best := p.cands[p.preferred]
	fmt.Fprintf(&b, "%s; preferred %s (priority %d)", closing, printable(best.Value), best.Priority)
	return b.String()
}

// candidateLines are status's lines for the candidates, best first:
// "candidate VALUE (priority P, leader, preferred)".
func (p preference) candidateLines() []string {
	out := make([]string, len(p.cands))
	for i, c := range p.cands {
		marks := ""
		if i == p.leader {
			marks += ", leader"
		}
		if i == p.preferred {
			marks += ", preferred"
		}
		out[i] = fmt.Sprintf("candidate %s (priority %d%s)", printable(c.Value), c.Priority, marks)
	}
	return out
}

// candidateJSON is a candidate as status --json and watch --json print it.
type candidateJSON struct {
	Value     string `json:"value"`
	Priority  int64  `json:"priority"`
	Leader    bool   `json:"leader"`
	Preferred bool   `json:"preferred"`
}

// asJSON lists the candidates, best first: null if they could not be
// read, [] if there are none.
func (p preference) asJSON() []candidateJSON {
	if p.cands == nil {
		return nil
	}
	out := make([]candidateJSON, len(p.cands))
	for i, c := range p.cands {
		out[i] = candidateJSON{Value: c.Value, Priority: c.Priority, Leader: i == p.leader, Preferred: i == p.preferred}
	}
	return out
}
