// Package logdiff compares two event logs, each read from seq 1 on (an
// exported file or a home: the caller says how): where they first part,
// each field of the two events there, and how every aggregate compares
// over the whole logs. It reads and decides; `cbth events diff` prints
// what it returns (spec/cli.md).
package logdiff

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"maps"
	"slices"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
)

// Source yields a log's events from seq from on, in order. engine.ErrStop
// from fn ends it cleanly.
type Source func(from uint64, fn func(events.Envelope) error) error

// Log is one side of a comparison: where its events come from, and what
// hears of each one read, if anything (a progress bar).
type Log struct {
	Read   Source
	OnRead func()
}

// Result is what Compare finds: the JSON of `cbth events diff`.
type Result struct {
	Identical      bool         `json:"identical"`
	EventsA        uint64       `json:"events_a"`
	EventsB        uint64       `json:"events_b"`
	FirstDivergent uint64       `json:"first_divergent_seq,omitempty"`
	AtA            *Event       `json:"a_at_divergence,omitempty"`
	AtB            *Event       `json:"b_at_divergence,omitempty"`
	Fields         []FieldDelta `json:"fields,omitempty"`
	Aggregates     Summary      `json:"aggregates"`
	Streams        []Stream     `json:"streams"`
	Truncated      bool         `json:"streams_truncated,omitempty"`
}

// Event is one log's event at the divergence.
type Event struct {
	Type   string `json:"type"`
	Stream string `json:"stream"`
	Hash   string `json:"hash"`
}

// FieldDelta is one field of the two events at the divergence: an
// envelope field, or payload.<key>; a side that lacks it is null.
type FieldDelta struct {
	Field string          `json:"field"`
	A     json.RawMessage `json:"a"`
	B     json.RawMessage `json:"b"`
}

// Summary counts the aggregates (streams) by how they compare.
type Summary struct {
	Same    int `json:"same"`
	Changed int `json:"changed"`
	OnlyA   int `json:"only_in_a"`
	OnlyB   int `json:"only_in_b"`
}

// Stream is one aggregate that is not the same in both logs.
type Stream struct {
	Stream string `json:"stream"`
	Status string `json:"status"` // StatusChanged, StatusOnlyA, StatusOnlyB
	A      int    `json:"events_a"`
	B      int    `json:"events_b"`
}

// How an aggregate that is not the same differs.
const (
	StatusChanged = "changed"
	StatusOnlyA   = "only_in_a"
	StatusOnlyB   = "only_in_b"
)

// MaxStreams bounds the differing aggregates Result lists (Summary counts
// them all).
const MaxStreams = 1000

// streamSum is one aggregate's events in a log: how many, and a digest of
// their hashes in order.
type streamSum struct {
	n   int
	sum events.Hash
}

// Compare reads a, then b, whole, keeping each event's hash and a digest
// per aggregate, and compares them: the logs are identical when every
// hash is. Each event at the divergence is read again from its log.
func Compare(a, b Log) (Result, error) {
	ha, ma, err := load(a)
	if err != nil {
		return Result{}, err
	}
	hb, mb, err := load(b)
	if err != nil {
		return Result{}, err
	}
	res := Result{EventsA: uint64(len(ha)), EventsB: uint64(len(hb)), Streams: []Stream{}}
	div := -1
	for i := 0; i < len(ha) || i < len(hb); i++ {
		if i >= len(ha) || i >= len(hb) || ha[i] != hb[i] {
			div = i
			break
		}
	}
	res.Identical = div < 0
	if div >= 0 {
		res.FirstDivergent = uint64(div + 1)
		ea, okA, err := eventAt(a.Read, res.FirstDivergent)
		if err != nil {
			return Result{}, err
		}
		eb, okB, err := eventAt(b.Read, res.FirstDivergent)
		if err != nil {
			return Result{}, err
		}
		if okA {
			res.AtA = &Event{ea.Type, ea.Stream.String(), ea.Hash.String()}
		}
		if okB {
			res.AtB = &Event{eb.Type, eb.Stream.String(), eb.Hash.String()}
		}
		res.Fields = fieldDeltas(ea, okA, eb, okB)
	}
	names := map[string]bool{}
	for k := range ma {
		names[k] = true
	}
	for k := range mb {
		names[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(names)) {
		a, b := ma[k], mb[k]
		d := Stream{Stream: k}
		switch {
		case a != nil && b != nil && *a == *b:
			res.Aggregates.Same++
			continue
		case a != nil && b != nil:
			res.Aggregates.Changed++
			d.Status, d.A, d.B = StatusChanged, a.n, b.n
		case a != nil:
			res.Aggregates.OnlyA++
			d.Status, d.A = StatusOnlyA, a.n
		default:
			res.Aggregates.OnlyB++
			d.Status, d.B = StatusOnlyB, b.n
		}
		if len(res.Streams) < MaxStreams {
			res.Streams = append(res.Streams, d)
		} else {
			res.Truncated = true
		}
	}
	return res, nil
}

// load reads a log whole: every event's hash in order and a digest per
// aggregate.
func load(l Log) ([]events.Hash, map[string]*streamSum, error) {
	var hashes []events.Hash
	streams := map[string]*streamSum{}
	err := l.Read(1, func(e events.Envelope) error {
		hashes = append(hashes, e.Hash)
		k := e.Stream.String()
		st := streams[k]
		if st == nil {
			st = &streamSum{}
			streams[k] = st
		}
		st.n++
		st.sum = sha256.Sum256(append(st.sum[:], e.Hash[:]...))
		if l.OnRead != nil {
			l.OnRead()
		}
		return nil
	})
	return hashes, streams, err
}

// eventAt reads the event at seq from a log, if it has one.
func eventAt(s Source, seq uint64) (events.Envelope, bool, error) {
	var out events.Envelope
	found := false
	err := s(seq, func(e events.Envelope) error {
		out, found = e, e.Seq == seq
		return engine.ErrStop
	})
	return out, found, err
}

// fieldDeltas compares two events field by field: the envelope's fields,
// then the payload's keys as payload.<key>.
func fieldDeltas(a events.Envelope, okA bool, b events.Envelope, okB bool) []FieldDelta {
	flat := func(e events.Envelope, ok bool) map[string]json.RawMessage {
		m := map[string]json.RawMessage{}
		if !ok {
			return m
		}
		raw, _ := json.Marshal(e)
		_ = json.Unmarshal(raw, &m)
		var p map[string]json.RawMessage
		if json.Unmarshal(m["payload"], &p) == nil {
			delete(m, "payload")
			for k, v := range p {
				m["payload."+k] = v
			}
		}
		return m
	}
	fa, fb := flat(a, okA), flat(b, okB)
	keys := map[string]bool{}
	for k := range fa {
		keys[k] = true
	}
	for k := range fb {
		keys[k] = true
	}
	null := json.RawMessage("null")
	var out []FieldDelta
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		va, ok := fa[k]
		if !ok {
			va = null
		}
		vb, ok := fb[k]
		if !ok {
			vb = null
		}
		if !bytes.Equal(va, vb) {
			out = append(out, FieldDelta{Field: k, A: va, B: vb})
		}
	}
	return out
}
