package lease

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched by every error about bad input (the root package
// exports it as redisleader.ErrInvalid). Such calls write nothing to Redis.
var ErrInvalid = errors.New("redisleader: invalid argument")

// invalidError is a bad-input error; it matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return "redisleader: " + e.msg }

func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// Invalidf returns a bad-input error, matching ErrInvalid, that says
// "redisleader: " and then format's text.
func Invalidf(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}
