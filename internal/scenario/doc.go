// Package scenario holds the reliability scenarios of redisleader: fault
// injection against real redis-server processes, in-process and child-process
// candidates, a fenced resource, and the history checker
// (internal/history) judging every run. It has no code of its own outside
// its tests.
//
// The fast tier runs with the normal test command and prints one line per
// scenario:
//
//	go test -count=1 -v -run TestScenario ./internal/scenario | grep '^SCENARIO'
//
// The chaos tier (randomized fault schedules, minutes to hours) is behind the
// chaos build tag:
//
//	go test -tags chaos -run TestChaos -timeout 0 -v ./internal/scenario -args -duration 30m -seed 1
//
// docs/RELIABILITY.md lists what each scenario shows.
package scenario
