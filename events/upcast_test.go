package events

import (
	"bytes"
	"errors"
	"testing"
)

type thing struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

func (thing) EventType() string { return "test.thing" }

// A payload stored at an old schema is upcast step by step to the current
// one before it is decoded; a missing step is an error, never a guess.
func TestDecodePayload_Upcasts(t *testing.T) {
	types()["test.thing"] = typeInfo{kind: KindJob, schema: 3, new: func() Payload { return &thing{} }, upcasts: map[uint16]Upcaster{
		1: func(raw []byte) ([]byte, error) {
			return bytes.Replace(raw, []byte(`"title"`), []byte(`"name"`), 1), nil
		},
		2: func(raw []byte) ([]byte, error) {
			return append(bytes.TrimSuffix(bytes.TrimSpace(raw), []byte("}")), []byte(`,"count":1}`)...), nil
		},
	}}
	defer delete(types(), "test.thing")
	e := Envelope{Type: "test.thing", Schema: 1, Payload: RawJSON(`{"title":"old"}`)}
	p, err := DecodePayload(&e)
	if err != nil {
		t.Fatal(err)
	}
	if got := *p.(*thing); got != (thing{Name: "old", Count: 1}) {
		t.Fatalf("upcast from schema 1 gave %+v", got)
	}
	e = Envelope{Type: "test.thing", Schema: 2, Payload: RawJSON(`{"name":"mid"}`)}
	if p, err := DecodePayload(&e); err != nil || *p.(*thing) != (thing{Name: "mid", Count: 1}) {
		t.Fatalf("upcast from schema 2: %+v %v", p, err)
	}
	delete(types()["test.thing"].upcasts, 1)
	e = Envelope{Type: "test.thing", Schema: 1, Payload: RawJSON(`{"title":"old"}`)}
	if _, err := DecodePayload(&e); !errors.Is(err, ErrSchema) {
		t.Fatalf("missing upcaster: %v, want ErrSchema", err)
	}
}
