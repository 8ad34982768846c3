package events

import (
	"encoding/hex"
	"errors"
	"fmt"
)

// UUID is an event id (RFC 9562 layout, written 8-4-4-4-12 in lowercase
// hex). It is defined here rather than taken from github.com/google/uuid
// because that package links crypto/rand, crypto/md5, crypto/sha1 and
// math/big, whose package inits then run at every start of the cbth
// binary, the object runner's included (spec/cortexfs.md, start-up cost).
// Its text form is the one github.com/google/uuid writes, so the JSON of
// envelopes is unchanged.
type UUID [16]byte

// String returns the canonical form, xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func (u UUID) String() string {
	var b [36]byte
	u.encode(b[:])
	return string(b[:])
}

// MarshalText writes the canonical form.
func (u UUID) MarshalText() ([]byte, error) {
	b := make([]byte, 36)
	u.encode(b)
	return b, nil
}

// UnmarshalText reads the canonical form (hex digits in either case),
// the only one cbth writes.
func (u *UUID) UnmarshalText(b []byte) error {
	id, err := ParseUUID(b)
	if err != nil {
		return err
	}
	*u = id
	return nil
}

// ParseUUID parses the canonical form, xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func ParseUUID(b []byte) (UUID, error) {
	var u UUID
	if len(b) != 36 || b[8] != '-' || b[13] != '-' || b[18] != '-' || b[23] != '-' {
		return UUID{}, fmt.Errorf("%w: %q", errBadUUID, b)
	}
	// The five groups of hex digits between the dashes.
	at := 0
	for _, g := range [5][2]int{{0, 8}, {9, 13}, {14, 18}, {19, 23}, {24, 36}} {
		n, err := hex.Decode(u[at:], b[g[0]:g[1]])
		if err != nil {
			return UUID{}, fmt.Errorf("%w: %q", errBadUUID, b)
		}
		at += n
	}
	return u, nil
}

var errBadUUID = errors.New("not a canonical UUID")

func (u UUID) encode(dst []byte) {
	hex.Encode(dst, u[:4])
	dst[8] = '-'
	hex.Encode(dst[9:13], u[4:6])
	dst[13] = '-'
	hex.Encode(dst[14:18], u[6:8])
	dst[18] = '-'
	hex.Encode(dst[19:23], u[8:10])
	dst[23] = '-'
	hex.Encode(dst[24:], u[10:])
}
