package redisgocron

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// quiet drops go-redis's log lines (dial failures of the cut-off instance).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// TestMain fails the package if any goroutine outlives the tests: the
// Lockers, Electors, sessions and schedulers must all have stopped.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}
