package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// Payload is the body of one event kind. Each kind is a Go struct in this
// package; its EventType names it in the log.
type Payload interface {
	EventType() string
}

// Upcaster rewrites a payload stored at schema version from into the next
// version's encoding. Registered upcasters run in sequence until the payload
// reaches the current schema, so old logs keep decoding forever.
type Upcaster func(raw []byte) ([]byte, error)

type typeInfo struct {
	kind    Kind
	schema  uint16
	new     func() Payload
	upcasts map[uint16]Upcaster // from version -> next version
}

// types is the fixed table of every event kind. It is built once, on first
// use, from the declarations below and never changes at run time: built
// lazily because the CLI shares this binary and never needs it.
var types = sync.OnceValue(func() map[string]typeInfo {
	m := make(map[string]typeInfo)
	for _, d := range declarations() {
		p := d.new()
		if _, dup := m[p.EventType()]; dup {
			panic("events: duplicate event type " + p.EventType())
		}
		m[p.EventType()] = typeInfo(d)
	}
	return m
})

// declarations lists every event kind with its aggregate and schema: each
// aggregate's file declares its own (adding an event kind means adding
// its type, its wire name and a line there).
func declarations() []declaration {
	return slices.Concat(jobEvents(), batchEvents(), attemptEvents(), artifactEvents(), bindingEvents(),
		installationEvents(), sessionEvents(), appServerEvents(), ctxSessionEvents(), cursorEvents(),
		ctxTreeEvents(), taskEvents(), gatewayEvents(), mcpEvents(), threadEvents())
}

type declaration struct {
	kind    Kind
	schema  uint16
	new     func() Payload
	upcasts map[uint16]Upcaster
}

func decl[T any, P interface {
	*T
	Payload
}](kind Kind) declaration {
	return declaration{kind: kind, schema: 1, new: func() Payload { return P(new(T)) }}
}

// Errors returned when a payload cannot be mapped to a known kind.
var (
	ErrUnknownType = errors.New("unknown event type")
	ErrSchema      = errors.New("unsupported schema version")
)

// KindOf returns the aggregate kind that events of type typ belong to.
func KindOf(typ string) (Kind, bool) {
	t, ok := types()[typ]
	return t.kind, ok
}

// SchemaOf returns the current schema version of an event type.
func SchemaOf(typ string) uint16 { return types()[typ].schema }

// TypesOf lists the event types of one aggregate kind, sorted.
func TypesOf(k Kind) []string {
	var out []string
	for name, t := range types() {
		if t.kind == k {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// New returns a zero payload of the given type.
func New(typ string) (Payload, error) {
	t, ok := types()[typ]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, typ)
	}
	return t.new(), nil
}

// MarshalPayload encodes a payload. Payloads are plain structs, so the JSON
// is deterministic: the same value always encodes to the same bytes.
func MarshalPayload(p Payload) ([]byte, error) {
	if _, ok := types()[p.EventType()]; !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, p.EventType())
	}
	return json.Marshal(p)
}

// DecodePayload decodes an envelope's payload into its Go type, upcasting
// from the stored schema version to the current one first.
func DecodePayload(e *Envelope) (Payload, error) {
	t, ok := types()[e.Type]
	if !ok {
		return nil, fmt.Errorf("seq %d: %w %q", e.Seq, ErrUnknownType, e.Type)
	}
	raw := []byte(e.Payload)
	for v := e.Schema; v < t.schema; v++ {
		up, ok := t.upcasts[v]
		if !ok {
			return nil, fmt.Errorf("seq %d: %s schema %d: %w", e.Seq, e.Type, v, ErrSchema)
		}
		var err error
		if raw, err = up(raw); err != nil {
			return nil, fmt.Errorf("seq %d: upcast %s from schema %d: %w", e.Seq, e.Type, v, err)
		}
	}
	if e.Schema > t.schema {
		return nil, fmt.Errorf("seq %d: %s schema %d is newer than %d: %w", e.Seq, e.Type, e.Schema, t.schema, ErrSchema)
	}
	p := t.new()
	if err := json.Unmarshal(raw, p); err != nil {
		return nil, fmt.Errorf("seq %d: decode %s: %w", e.Seq, e.Type, err)
	}
	return p, nil
}
