package ipc

import (
	"bytes"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Text crosses the socket as given or not at all. encoding/json writes
// each byte of a string that is not valid UTF-8 as U+FFFD, and reads such
// bytes in a frame the same way, so two different thread ids could arrive
// as one. The client refuses arguments holding such a string before it
// sends anything, and the server refuses a frame that is not valid UTF-8.

// replaced reports whether json.Marshal replaced invalid UTF-8 in b: it
// writes the six bytes \ufffd for each such byte, and a backslash that
// was in the text itself comes out doubled, so an escape that starts
// after an even run of backslashes is one of its replacements.
func replaced(b []byte) bool {
	for i := 0; ; {
		j := bytes.Index(b[i:], []byte(`\ufffd`))
		if j < 0 {
			return false
		}
		j += i
		n := 0
		for k := j - 1; k >= 0 && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return true
		}
		i = j + 1
	}
}

// invalidField names the first string in v (by its JSON path) that is
// not valid UTF-8, or "" when there is none.
func invalidField(v any) string {
	var walk func(path string, v reflect.Value) string
	walk = func(path string, v reflect.Value) string {
		switch v.Kind() {
		case reflect.String:
			if !utf8.ValidString(v.String()) {
				return path
			}
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				return walk(path, v.Elem())
			}
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				f := v.Type().Field(i)
				if !f.IsExported() {
					continue
				}
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "-" {
					continue
				}
				if name == "" {
					name = f.Name
				}
				if p := walk(strings.TrimPrefix(path+"."+name, "."), v.Field(i)); p != "" {
					return p
				}
			}
		case reflect.Slice, reflect.Array:
			if v.Type().Elem().Kind() == reflect.Uint8 {
				return "" // bytes are sent as base64 or raw JSON, not as text
			}
			for i := 0; i < v.Len(); i++ {
				if p := walk(path+"[]", v.Index(i)); p != "" {
					return p
				}
			}
		case reflect.Map:
			it := v.MapRange()
			for it.Next() {
				if k := it.Key(); k.Kind() == reflect.String && !utf8.ValidString(k.String()) {
					return path + "{key}"
				}
				if p := walk(path+"."+it.Key().String(), it.Value()); p != "" {
					return p
				}
			}
		}
		return ""
	}
	return walk("", reflect.ValueOf(v))
}

// checkText refuses arguments that json.Marshal changed.
func checkText(op string, args any, b []byte) error {
	if !replaced(b) {
		return nil
	}
	if f := invalidField(args); f != "" {
		return errs.New(errs.EINVAL, "%s: %s is not valid UTF-8; cbth takes text as given or not at all", op, f)
	}
	return errs.New(errs.EINVAL, "%s: an argument is not valid UTF-8; cbth takes text as given or not at all", op)
}
