package lease

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Replies: what each script family's reply says (the acquire, renew and
// release replies are decoded in plain.go, beside their vectors). A
// decoder never puts the reply itself in an error: it could hold another
// owner's token.

// An Inspected is one server's reply to inspect.
type Inspected struct {
	Present bool   // the lock key exists
	Known   bool   // and holds a value this package wrote (Holder)
	Holder  Holder // a reservation is a holder without a token
	PTTL    int64  // ms; 0 when none
}

// DecodeInspect decodes cmd, an inspect call.
func DecodeInspect(cmd *redis.Cmd) (Inspected, error) {
	res, err := cmd.Slice()
	switch {
	case errors.Is(err, redis.Nil):
		return Inspected{}, nil
	case err != nil:
		return Inspected{}, err
	case len(res) != 2:
		return Inspected{Present: true}, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	stored, _ := res[0].(string)
	r := Inspected{Present: true}
	r.Holder, r.Known = ParseHolder(stored)
	if ms, ok := res[1].(int64); ok && ms > 0 {
		r.PTTL = ms
	}
	return r, nil
}
