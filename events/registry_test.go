package events_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/fill"
)

// Every registered event type: New makes a payload of that type, listed
// under its kind; filled through and through, it is encoded
// the same twice and comes back from an envelope equal, field by field
// (a field the JSON drops or mangles fails here, not in a replay).
func TestEveryPayloadRoundTrips(t *testing.T) {
	for _, k := range events.Kinds {
		types := events.TypesOf(k)
		if len(types) == 0 {
			t.Errorf("kind %s has no event types", k)
		}
		for _, typ := range types {
			p, err := events.New(typ)
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			if p.EventType() != typ {
				t.Errorf("New(%q) is a %s", typ, p.EventType())
			}
			if got, ok := events.KindOf(typ); !ok || got != k {
				t.Errorf("%s: kind %s, listed under %s", typ, got, k)
			}
			fill.Value(reflect.ValueOf(p).Elem())
			b, err := events.MarshalPayload(p)
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			if again, _ := events.MarshalPayload(p); !bytes.Equal(again, b) {
				t.Errorf("%s: encoded twice differently", typ)
			}
			back, err := events.DecodePayload(&events.Envelope{Type: typ, Schema: events.SchemaOf(typ), Payload: b})
			if err != nil {
				t.Fatalf("%s: decode: %v", typ, err)
			}
			if !reflect.DeepEqual(back, p) {
				t.Errorf("%s: the round trip changed the payload:\n%+v\n%+v", typ, back, p)
			}
		}
	}
}

// An unregistered type is refused on both sides; a stored schema newer
// than the code's is refused, never guessed at.
func TestRegistryRefusals(t *testing.T) {
	if _, err := events.New("no.such"); !errors.Is(err, events.ErrUnknownType) {
		t.Errorf("New of an unknown type: %v", err)
	}
	if _, ok := events.KindOf("no.such"); ok {
		t.Error("an unknown type has a kind")
	}
	typ := events.TypeJobSubmitted
	if _, err := events.DecodePayload(&events.Envelope{Type: typ, Schema: events.SchemaOf(typ) + 1, Payload: events.RawJSON(`{}`)}); !errors.Is(err, events.ErrSchema) {
		t.Errorf("a newer schema: %v", err)
	}
	if _, err := events.DecodePayload(&events.Envelope{Type: typ, Schema: events.SchemaOf(typ), Payload: events.RawJSON(`{"target_kind":5}`)}); err == nil {
		t.Error("a mistyped payload decoded")
	}
}

// A stream's key is its kind and id with a NUL between: no two streams
// share a key, and one whose id extends another's never sorts among its
// prefix's entries by accident of the separator.
func TestStreamKeyAndHashText(t *testing.T) {
	a := events.StreamID{Kind: events.KindJob, ID: "a"}
	ab := events.StreamID{Kind: events.KindJob, ID: "ab"}
	other := events.StreamID{Kind: "jo", ID: "b\x00a"}
	if bytes.Equal(a.Key(), ab.Key()) || bytes.Equal(a.Key(), other.Key()) || !bytes.HasPrefix(a.Key(), []byte("job\x00")) || a.String() != "job/a" {
		t.Errorf("keys %q %q %q", a.Key(), ab.Key(), other.Key())
	}
	var h events.Hash
	for i := range h {
		h[i] = byte(i)
	}
	txt, _ := h.MarshalText()
	var back events.Hash
	if err := back.UnmarshalText(txt); err != nil || back != h {
		t.Errorf("hash text round trip: %v %x", err, back)
	}
	if err := back.UnmarshalText([]byte("abcd")); err == nil {
		t.Error("a short hash parsed")
	}
	var raw events.RawJSON
	if b, _ := raw.MarshalJSON(); string(b) != "null" {
		t.Errorf("empty raw JSON marshals as %s", b)
	}
}
