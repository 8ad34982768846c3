// Package fill gives every field of a value something that is not its
// zero, through and through, for property tests over every type of a
// kind (every event payload, every aggregate state): a field a copy, an
// encoding or a decoding drops or shares then shows.
package fill

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"time"

	"github.com/cbth-dev/cbth/events"
)

var (
	rawJSON   = reflect.TypeOf(events.RawJSON(nil))
	timeType  = reflect.TypeOf(time.Time{})
	marshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	textMarsh = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
)

// Value fills v (addressable): strings, numbers and times each with a
// value of their own, true for bools, two-element slices and maps,
// pointers to filled values (to a depth of four), an encoded payload as
// {"n":N}, a number that encodes itself (an enumeration such as
// events.Allow) as 1, an interface as a string. The exported fields of an
// unexported embedded struct (an aggregate's header) are filled too.
func Value(v reflect.Value) { value(v, new(int), 0) }

func value(v reflect.Value, n *int, depth int) {
	*n++
	switch {
	case v.Type() == rawJSON:
		v.SetBytes([]byte(fmt.Sprintf(`{"n":%d}`, *n)))
		return
	case v.Type() == timeType:
		v.Set(reflect.ValueOf(time.Date(2026, 1, 1, 0, 0, *n, 0, time.UTC)))
		return
	case encodesItself(v.Type()) && v.Kind() >= reflect.Int && v.Kind() <= reflect.Uint64:
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
			f := v.Field(i)
			switch {
			case f.CanSet():
				value(f, n, depth)
			case v.Type().Field(i).Anonymous && f.Kind() == reflect.Struct:
				for j := range f.NumField() {
					if g := f.Field(j); g.CanSet() {
						value(g, n, depth)
					}
				}
			}
		}
	case reflect.Slice:
		if depth < 4 {
			s := reflect.MakeSlice(v.Type(), 2, 2)
			for i := range 2 {
				value(s.Index(i), n, depth+1)
			}
			v.Set(s)
		}
	case reflect.Map:
		if depth < 4 {
			m := reflect.MakeMap(v.Type())
			for range 2 {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				value(k, n, depth+1)
				value(e, n, depth+1)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Pointer:
		if depth < 4 {
			p := reflect.New(v.Type().Elem())
			value(p.Elem(), n, depth+1)
			v.Set(p)
		}
	case reflect.Interface:
		v.Set(reflect.ValueOf(fmt.Sprintf("i%d", *n)))
	}
}

// encodesItself reports whether values of t have their own encoding.
func encodesItself(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(marshaler) || t.Implements(textMarsh) || p.Implements(marshaler) || p.Implements(textMarsh)
}
