package aggregate_test

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/fill"
)

var rawJSONType = reflect.TypeOf(events.RawJSON(nil))

// scribble changes, in place, everything v reaches through a slice, a
// map or a pointer: what a command might do to its copy of a state.
func scribble(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				scribble(f)
			}
		}
	case reflect.Slice:
		if v.Type() == rawJSONType {
			// An encoded payload is a value: code replaces it, never
			// writes into it, so a clone may share it.
			return
		}
		for i := range v.Len() {
			overwrite(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			overwrite(e)
			v.SetMapIndex(k, e)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			overwrite(v.Elem())
		}
	}
}

// overwrite changes v itself (a string, a number) or, for a composite,
// what it holds.
func overwrite(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("scribbled")
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(-1)
	case reflect.Uint, reflect.Uint64, reflect.Uint32:
		v.SetUint(0)
	case reflect.Bool:
		v.SetBool(false)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Time{}))
			return
		}
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				overwrite(f)
				scribble(f)
			}
		}
	default:
		scribble(v)
	}
}

// Clone is deep: every state of every kind, filled through and through,
// stays as it was however its clone is changed in place (its slices, its
// maps, what its pointers point at).
func TestCloneIsDeep(t *testing.T) {
	for _, tab := range fsm.Tables() {
		st, err := aggregate.New(tab.Kind, "id")
		if err != nil {
			t.Fatal(err)
		}
		fill.Value(reflect.ValueOf(st).Elem())
		before, err := aggregate.Encode(st)
		if err != nil {
			t.Fatalf("%s: encode: %v", tab.Kind, err)
		}
		c := aggregate.Clone(st)
		if aggregate.KindOf(c) != tab.Kind {
			t.Fatalf("%s: the clone is a %s", tab.Kind, aggregate.KindOf(c))
		}
		same, _ := aggregate.Encode(c)
		if !bytes.Equal(same, before) {
			t.Fatalf("%s: the clone differs from the state:\n%s\n%s", tab.Kind, same, before)
		}
		scribble(reflect.ValueOf(c).Elem())
		after, _ := aggregate.Encode(st)
		if !bytes.Equal(after, before) {
			t.Errorf("%s: changing the clone changed the state:\nbefore %s\nafter  %s", tab.Kind, before, after)
		}
	}
}
