package aggregate_test

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

var rawJSONType = reflect.TypeOf(events.RawJSON(nil))

// fill sets every settable field of v to a value of its type that is not
// its zero: strings, numbers, times, two-element slices and maps, and
// pointers to filled values, depth-first.
func fill(v reflect.Value, seed *int, depth int) {
	*seed++
	n := *seed
	if v.Type() == rawJSONType {
		v.SetBytes([]byte(fmt.Sprintf(`{"n":%d}`, n)))
		return
	}
	if v.Type() == reflect.TypeOf(time.Time{}) {
		v.Set(reflect.ValueOf(time.Date(2026, 1, 1, 0, 0, n, 0, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(n))
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				fill(f, seed, depth)
			} else if v.Type().Field(i).Anonymous && f.Kind() == reflect.Struct {
				// An unexported embedded struct (the header's record):
				// its exported fields are still settable through it.
				for j := range f.NumField() {
					if g := f.Field(j); g.CanSet() {
						fill(g, seed, depth)
					}
				}
			}
		}
	case reflect.Slice:
		if depth > 4 {
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), seed, depth+1)
		}
		v.Set(s)
	case reflect.Map:
		if depth > 4 {
			return
		}
		m := reflect.MakeMap(v.Type())
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, seed, depth+1)
			fill(e, seed, depth+1)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.Pointer:
		if depth > 4 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), seed, depth+1)
		v.Set(p)
	}
}

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
		seed := 0
		fill(reflect.ValueOf(st).Elem(), &seed, 0)
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
