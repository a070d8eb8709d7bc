package lease

import (
	"errors"
	"fmt"

	"github.com/redisleader/redisleader/internal/wire"
)

// ErrInvalid is matched by every error about bad input (the root package
// exports it as redisleader.ErrInvalid). Such calls write nothing to Redis.
var ErrInvalid = errors.New("redisleader: invalid argument")

// ErrLocked is an acquire that found the name held (the root package
// exports it as redisleader.ErrLocked).
var ErrLocked = errors.New("redisleader: held by another owner")

// ForeignValue is the error for a lock key that holds data this package
// did not write. It is permanent: a blocking acquire returns it rather
// than wait for a lease that is not one.
func ForeignValue(k Keys) error {
	return &wire.ScriptError{Msg: fmt.Sprintf("ERR redisleader: key %s holds a value this package did not write; it was left unchanged", k.Lock)}
}

// invalidError is a bad-input error; it matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return "redisleader: " + e.msg }

func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// Invalidf returns a bad-input error, matching ErrInvalid, that says
// "redisleader: " and then format's text.
func Invalidf(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}
