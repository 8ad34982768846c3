package command

import (
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
	"strconv"
	"time"
)

// Backoff is how long a delivery rejected before acceptance (a proven
// benign reject: nothing reached the thread) waits before its next try:
// Base after the first reject, doubling with each further reject of the
// same attempt, never more than Max. Jitter, a fraction in [0, 1), takes
// up to that share off each delay (any other value means none), so threads rejected together (a
// channel that answered "overloaded" to all of them) do not come back
// together.
//
// The jitter is not random: it is drawn from a hash of the attempt id and
// the reject count, both in the log, so the same log and config always
// decide the same eligible_after, on any clock. The decision records the
// time it chose (batch.eligible_after_set); replay never calls Delay.
type Backoff struct {
	Base   time.Duration
	Max    time.Duration // at most this; a Max below Base means Base, always
	Jitter float64
}

// Delay returns the wait after the rejects-th reject (1 for the first) of
// the attempt attemptID. It is always more than zero when Base is, within
// [d - d*Jitter, d] where d = min(Base * 2^(rejects-1), max(Base, Max)).
func (b Backoff) Delay(attemptID string, rejects int) time.Duration {
	if b.Base <= 0 {
		return 0
	}
	limit := max(b.Base, b.Max)
	d := b.Base
	for i := 1; i < rejects && d < limit; i++ {
		if d > limit/2 {
			d = limit
			break
		}
		d *= 2
	}
	d = min(d, limit)
	if b.Jitter <= 0 || b.Jitter >= 1 {
		return d
	}
	// One multiplication, so no fused operation can round it differently
	// on another architecture; the draw itself is integer arithmetic.
	span := uint64(float64(d) * b.Jitter)
	h := sha256.Sum256([]byte(attemptID + "\x00" + strconv.Itoa(rejects)))
	off, _ := bits.Mul64(span, binary.BigEndian.Uint64(h[:8])) // span * u, u in [0, 1)
	return d - time.Duration(off)
}
