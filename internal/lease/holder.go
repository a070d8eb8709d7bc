package lease

// Each acquire, proclaim and release publishes an event on the channel lock
// key + ":ch" (not a key, so it need not be declared). PUBLISH on Redis
// Cluster reaches every node; the channel carries the name's hash tag, so it
// is also ready for sharded pub/sub (SPUBLISH). Events carry no content:
// "A" for an acquisition or a new value, "R" for a release. They are only
// hints to read the state again (pub/sub loses messages, and a script can
// publish and then fail on its first write, under OOM say), and they tell a
// subscriber nothing about the owner: no token, no fence, no value. Expiry
// publishes nothing: waiters re-read the state when a lease can have expired.
//
// The scripts compare the token as a prefix of the stored value:
// "<token>\n", where the token is 128 random bits in base32
// (crypto/rand.Text) and contains no newline, so no value can fake another
// owner's token.

// A Holder is what a lock key says about its owner: "<token>\n<fence>\n<value>"
// (ParseHolder, in node.go beside the decoders of the replies that carry it).
type Holder struct {
	Token string
	Fence int64
	Value string
}

// A Reservation is what a Transfer leaves in the lock key for a successor
// (lua/hand_off.lua): "\n<fence>\n<successor's value>", no token, so that no
// token matches it; the acquire scripts let a candidate campaigning with
// that value take it.
type Reservation struct {
	Fence int64 // the former leader's
	For   string
}
