// Package events defines the immutable event envelope that every cbth state
// change is recorded in, its binary codec and hash chain, and one Go type per
// event kind for every aggregate.
//
// A stored record is the canonical encoding of an envelope without its hash,
// followed by the 32-byte SHA-256 of those bytes. The canonical encoding
// begins with the previous record's hash, so the hash of record N covers
// prev_hash and every other field of N: flipping any byte of any stored
// record breaks either that record's hash or the next record's link.
package events

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Kind names an aggregate kind: the first half of a stream identity.
type Kind string

// Kinds lists every aggregate kind in a fixed order. Each kind is
// declared beside its events (job.go, batch.go, ...).
var Kinds = []Kind{KindJob, KindBatch, KindAttempt, KindArtifact, KindBinding, KindInstallation, KindSession, KindCtxSession, KindCursor, KindCtxTree, KindAppServer,
	KindTask, KindGatewayRoute, KindGatewayStream, KindMCP, KindThread}

// StreamID identifies one aggregate instance.
type StreamID struct {
	Kind Kind   `json:"kind"`
	ID   string `json:"id"`
}

// String renders the stream as "kind/id".
func (s StreamID) String() string { return string(s.Kind) + "/" + s.ID }

// Key is the byte form used as a bbolt key: kind, NUL, id.
func (s StreamID) Key() []byte {
	b := make([]byte, 0, len(s.Kind)+1+len(s.ID))
	b = append(b, s.Kind...)
	b = append(b, 0)
	return append(b, s.ID...)
}

// Actor says who caused an event.
type Actor string

// The actors of MISSION.md rule 2.
const (
	ActorCLI      Actor = "cli"
	ActorDesktop  Actor = "desktop"
	ActorBridge   Actor = "bridge"
	ActorCaller   Actor = "caller"
	ActorOperator Actor = "operator"
	ActorSweep    Actor = "sweep"
	ActorAdapter  Actor = "adapter"
	// ActorAgent is the agent inside a Codex thread, through cbth's MCP
	// tools (spec/mcp.md).
	ActorAgent Actor = "agent"
)

// Hash is a SHA-256 digest.
type Hash [sha256.Size]byte

// String renders the hash in lowercase hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// MarshalText renders the hash in hex for JSON.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText parses a hex hash.
func (h *Hash) UnmarshalText(b []byte) error {
	if len(b) != 2*sha256.Size {
		return fmt.Errorf("hash: want %d hex digits, got %d", 2*sha256.Size, len(b))
	}
	_, err := hex.Decode(h[:], b)
	return err
}

// Envelope is one immutable event as stored in the log.
type Envelope struct {
	Seq           uint64    `json:"seq"`
	ID            uuid.UUID `json:"event_id"`
	Stream        StreamID  `json:"stream"`
	Version       uint64    `json:"stream_version"`
	Type          string    `json:"type"`
	Schema        uint16    `json:"schema_version"`
	RecordedAt    time.Time `json:"recorded_at"`
	Actor         Actor     `json:"actor"`
	CommandID     string    `json:"command_id,omitempty"`
	CorrelationID string    `json:"correlation_id,omitempty"`
	Payload       RawJSON   `json:"payload"`
	PrevHash      Hash      `json:"prev_hash"`
	Hash          Hash      `json:"hash"`
}

// RawJSON is an event payload kept in its encoded form. It marshals as the
// JSON value itself, not as base64.
type RawJSON []byte

// MarshalJSON returns the raw bytes.
func (r RawJSON) MarshalJSON() ([]byte, error) {
	if len(r) == 0 {
		return []byte("null"), nil
	}
	return r, nil
}

// UnmarshalJSON copies the raw bytes.
func (r *RawJSON) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// codecVersion is the first byte of every record. A new layout gets a new
// number; old records stay decodable forever.
const codecVersion = 1

// Limits that keep a corrupt length prefix from allocating the machine away.
const (
	maxStringField = 1 << 16
	maxPayload     = 1 << 24
)

// Codec errors. Decode wraps them with the offset or field that failed.
var (
	ErrCorrupt      = errors.New("corrupt event record")
	ErrHashMismatch = errors.New("event hash mismatch")
)

// Encode returns the stored record for e: the canonical encoding of every
// field but Hash, then the SHA-256 of that encoding. It also sets e.Hash.
func Encode(e *Envelope) []byte {
	n := 1 + 32 + 16 + 8*4 + 2 + len(e.Stream.Kind) + len(e.Stream.ID) + len(e.Type) + len(e.Actor) +
		len(e.CommandID) + len(e.CorrelationID) + len(e.Payload) + 7*binary.MaxVarintLen32 + 32
	b := make([]byte, 0, n)
	b = append(b, codecVersion)
	b = append(b, e.PrevHash[:]...)
	b = binary.BigEndian.AppendUint64(b, e.Seq)
	b = append(b, e.ID[:]...)
	b = appendString(b, string(e.Stream.Kind))
	b = appendString(b, e.Stream.ID)
	b = binary.BigEndian.AppendUint64(b, e.Version)
	b = appendString(b, e.Type)
	b = binary.BigEndian.AppendUint16(b, e.Schema)
	b = binary.BigEndian.AppendUint64(b, uint64(e.RecordedAt.UnixNano()))
	b = appendString(b, string(e.Actor))
	b = appendString(b, e.CommandID)
	b = appendString(b, e.CorrelationID)
	b = appendString(b, string(e.Payload))
	e.Hash = sha256.Sum256(b)
	return append(b, e.Hash[:]...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Decode parses a stored record. It checks the record's own hash; the link
// to the previous record is the caller's to check. The returned envelope
// does not alias rec.
func Decode(rec []byte) (Envelope, error) {
	var e Envelope
	if len(rec) < 1+32+32 {
		return e, fmt.Errorf("%w: %d bytes is too short", ErrCorrupt, len(rec))
	}
	if rec[0] != codecVersion {
		return e, fmt.Errorf("%w: unknown codec version %d", ErrCorrupt, rec[0])
	}
	body, sum := rec[:len(rec)-32], rec[len(rec)-32:]
	if got := sha256.Sum256(body); string(got[:]) != string(sum) {
		return e, ErrHashMismatch
	}
	copy(e.Hash[:], sum)
	if err := decodeBody(&e, body); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// DecodeUnverified parses a record without recomputing its hash. Replay uses
// it on a log that Verify has already walked; everything else uses Decode.
func DecodeUnverified(rec []byte) (Envelope, error) {
	var e Envelope
	if len(rec) < 1+32+32 || rec[0] != codecVersion {
		return e, fmt.Errorf("%w: bad header", ErrCorrupt)
	}
	copy(e.Hash[:], rec[len(rec)-32:])
	if err := decodeBody(&e, rec[:len(rec)-32]); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

func decodeBody(e *Envelope, b []byte) error {
	r := reader{b: b, off: 1}
	copy(e.PrevHash[:], r.next(32))
	e.Seq = r.uint64()
	copy(e.ID[:], r.next(16))
	e.Stream.Kind = Kind(r.string(maxStringField))
	e.Stream.ID = r.string(maxStringField)
	e.Version = r.uint64()
	e.Type = r.string(maxStringField)
	e.Schema = uint16(r.uint(2))
	e.RecordedAt = time.Unix(0, int64(r.uint64())).UTC()
	e.Actor = Actor(r.string(maxStringField))
	e.CommandID = r.string(maxStringField)
	e.CorrelationID = r.string(maxStringField)
	if p := r.string(maxPayload); p != "" {
		e.Payload = RawJSON(p)
	}
	if r.err != nil {
		return r.err
	}
	if r.off != len(b) {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(b)-r.off)
	}
	return nil
}

// HashOf returns the hash stored at the end of a record without decoding it.
func HashOf(rec []byte) (Hash, bool) {
	var h Hash
	if len(rec) < 32 {
		return h, false
	}
	copy(h[:], rec[len(rec)-32:])
	return h, true
}

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) next(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b)-r.off < n {
		r.err = fmt.Errorf("%w: truncated at offset %d", ErrCorrupt, r.off)
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

func (r *reader) uint64() uint64 {
	p := r.next(8)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

func (r *reader) uint(n int) uint64 {
	p := r.next(n)
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v
}

func (r *reader) string(limit int) string {
	if r.err != nil {
		return ""
	}
	n, w := binary.Uvarint(r.b[r.off:])
	if w <= 0 || n > uint64(limit) {
		r.err = fmt.Errorf("%w: bad length at offset %d", ErrCorrupt, r.off)
		return ""
	}
	r.off += w
	return string(r.next(int(n)))
}
