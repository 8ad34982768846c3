package events

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
)

// UUID is an event id (RFC 9562 layout, written 8-4-4-4-12 in lowercase
// hex). It is defined here rather than taken from github.com/google/uuid
// because that package links crypto/rand, crypto/md5, crypto/sha1 and
// math/big, whose package inits then run at every start of the cbth
// binary, the object runner's included (spec/cortexfs.md, start-up cost).
// Its text form is the one github.com/google/uuid reads and writes, so the
// JSON of envelopes is unchanged.
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

// UnmarshalText reads the forms github.com/google/uuid accepts: canonical,
// with a urn:uuid: prefix, in braces, or 32 bare hex digits.
func (u *UUID) UnmarshalText(b []byte) error {
	id, err := ParseUUID(b)
	if err != nil {
		return err
	}
	*u = id
	return nil
}

// ParseUUID parses an id in any form UnmarshalText accepts.
func ParseUUID(b []byte) (UUID, error) {
	var u UUID
	switch len(b) {
	case 36:
	case 36 + 9:
		if !bytes.EqualFold(b[:9], []byte("urn:uuid:")) {
			return u, fmt.Errorf("invalid urn prefix: %q", b[:9])
		}
		b = b[9:]
	case 36 + 2:
		b = b[1:]
	case 32:
		if _, err := hex.Decode(u[:], b); err != nil {
			return UUID{}, errBadUUID
		}
		return u, nil
	default:
		return u, fmt.Errorf("invalid UUID length: %d", len(b))
	}
	if b[8] != '-' || b[13] != '-' || b[18] != '-' || b[23] != '-' {
		return u, errBadUUID
	}
	for i, x := range [16]int{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34} {
		if _, err := hex.Decode(u[i:i+1], b[x:x+2]); err != nil {
			return UUID{}, errBadUUID
		}
	}
	return u, nil
}

var errBadUUID = errors.New("invalid UUID format")

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
