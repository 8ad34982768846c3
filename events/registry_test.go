package events_test

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/events"
)

var rawType = reflect.TypeOf(events.RawJSON(nil))

// fill gives every exported field of v a value that is not its zero, so
// a field a payload's JSON drops (a missing or mistyped tag) shows.
func fill(v reflect.Value, n *int, depth int) {
	*n++
	switch {
	case v.Type() == rawType:
		v.SetBytes([]byte(fmt.Sprintf(`{"n":%d}`, *n)))
		return
	case v.Type() == reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(time.Date(2026, 1, 1, 0, 0, *n, 0, time.UTC)))
		return
	}
	if custom(v.Type()) && v.Kind() >= reflect.Int && v.Kind() <= reflect.Uint64 {
		// An enumeration with its own encoding (events.Allow): one of
		// its values, not any number.
		if v.CanInt() {
			v.SetInt(1)
		} else {
			v.SetUint(1)
		}
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				fill(f, n, depth)
			}
		}
	case reflect.Slice:
		if depth < 4 {
			s := reflect.MakeSlice(v.Type(), 2, 2)
			for i := range 2 {
				fill(s.Index(i), n, depth+1)
			}
			v.Set(s)
		}
	case reflect.Map:
		if depth < 4 {
			m := reflect.MakeMap(v.Type())
			for range 2 {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				fill(k, n, depth+1)
				fill(e, n, depth+1)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Pointer:
		if depth < 4 {
			p := reflect.New(v.Type().Elem())
			fill(p.Elem(), n, depth+1)
			v.Set(p)
		}
	case reflect.Interface:
		// An any holds what JSON gives back: a string survives the trip.
		v.Set(reflect.ValueOf(fmt.Sprintf("i%d", *n)))
	}
}

// custom reports whether values of t encode themselves.
func custom(t reflect.Type) bool {
	m := reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	tm := reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
	return t.Implements(m) || t.Implements(tm) || reflect.PointerTo(t).Implements(m) || reflect.PointerTo(t).Implements(tm)
}

// Every registered event type: New makes a payload of that type, listed
// under its kind; filled through and through, it is encoded
// the same twice and comes back from an envelope equal, field by field
// (a field the JSON drops or mangles fails here, not in a replay).
func TestEveryPayloadRoundTrips(t *testing.T) {
	n := 0
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
			fill(reflect.ValueOf(p).Elem(), &n, 0)
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
