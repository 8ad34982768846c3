package events

import (
	"crypto/sha256"
	"encoding/binary"
	"time"

	"github.com/google/uuid"
)

// DeriveID returns a UUIDv7 whose timestamp is at (not the wall clock) and
// whose random bits come from SHA-256 of seed. (uuid.NewV7 takes the wall
// clock and crypto/rand, so it cannot give the same id twice.) The engine seeds it with the
// previous event's hash and a counter, so ids are unique along the chain
// and the same log replayed from the same commands yields the same ids.
func DeriveID(at time.Time, seed ...[]byte) uuid.UUID {
	h := sha256.New()
	for _, s := range seed {
		h.Write(s)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	var u uuid.UUID
	ms := uint64(at.UnixMilli())
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], ms)
	copy(u[0:6], ts[2:8])
	copy(u[6:], sum[:10])
	u[6] = 0x70 | (u[6] & 0x0f) // version 7
	u[8] = 0x80 | (u[8] & 0x3f) // RFC 9562 variant
	return u
}
