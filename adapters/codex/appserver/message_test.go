package appserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Messages as Codex 0.169 sends them (no "jsonrpc", emittedAtMs on
// notifications) and as cbth sends them.
var decodeCases = []struct {
	in   string
	kind Kind
	id   string // ID.String(), for requests and responses
	meth string
	err  bool
}{
	{in: `{"id":1,"result":{"userAgent":"x"}}`, kind: KindResponse, id: "1"},
	{in: `{"id":3,"result":{}}`, kind: KindResponse, id: "3"},
	{in: `{"id":4,"result":null}`, kind: KindResponse, id: "4"},
	{in: `{"jsonrpc":"2.0","id":"a","error":{"code":-32600,"message":"no rollout found"}}`, kind: KindResponse, id: `"a"`},
	{in: `{"method":"turn/started","params":{"threadId":"t"},"emittedAtMs":1}`, kind: KindNotification, meth: "turn/started"},
	{in: `{"method":"initialized"}`, kind: KindNotification, meth: "initialized"},
	{in: `{"method":"x","params":null}`, kind: KindNotification, meth: "x"},
	{in: `{"id":0,"method":"item/commandExecution/requestApproval","params":{}}`, kind: KindRequest, id: "0", meth: "item/commandExecution/requestApproval"},
	{in: ` {"id":-5,"method":"m","params":[1]}`, kind: KindRequest, id: "-5", meth: "m"},

	{in: ``, err: true},
	{in: `[]`, err: true},
	{in: `"x"`, err: true},
	{in: `{`, err: true},
	{in: `{"jsonrpc":"1.0","method":"m"}`, err: true},
	{in: `{"method":""}`, err: true},
	{in: `{"method":"m","params":3}`, err: true},
	{in: `{"method":"m","id":1,"result":{}}`, err: true},
	{in: `{"id":1}`, err: true},
	{in: `{"result":{}}`, err: true},
	{in: `{"id":null,"error":{"code":-32700,"message":"parse"}}`, err: true},
	{in: `{"id":1,"result":{},"error":{"code":1,"message":""}}`, err: true},
	{in: `{"id":1,"error":{"message":"no code"}}`, err: true},
	{in: `{"id":1,"error":null}`, err: true},
	{in: `{"id":1.5,"result":{}}`, err: true},
	{in: `{"id":true,"result":{}}`, err: true},
	{in: `{"id":99999999999999999999,"result":{}}`, err: true},
}

func TestDecode(t *testing.T) {
	for _, tc := range decodeCases {
		m, err := Decode([]byte(tc.in))
		if tc.err {
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: %+v, %v; want ErrMalformed", tc.in, m, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if m.Kind != tc.kind || m.Method != tc.meth || (tc.kind != KindNotification && m.ID.String() != tc.id) {
			t.Errorf("%s: kind %v id %s method %q", tc.in, m.Kind, m.ID, m.Method)
		}
	}
}

// Whatever Decode accepts, Encode writes back in a form Decode reads as the
// same message; and Decode never panics.
func FuzzDecode(f *testing.F) {
	for _, tc := range decodeCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		out, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode(%+v): %v", m, err)
		}
		back, err := Decode(out)
		if err != nil {
			t.Fatalf("Decode(Encode(%q)) = %v (%s)", b, err, out)
		}
		if back.Kind != m.Kind || back.ID != m.ID || back.Method != m.Method ||
			!sameJSON(back.Params, m.Params) || !sameJSON(back.Result, m.Result) || (back.Error == nil) != (m.Error == nil) {
			t.Fatalf("round trip of %q: %+v became %+v", b, m, back)
		}
		if m.Error != nil && (back.Error.Code != m.Error.Code || back.Error.Message != m.Error.Message) {
			t.Fatalf("round trip of %q: error %+v became %+v", b, m.Error, back.Error)
		}
	})
}

func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return false
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}

// The stdio framing cuts a byte stream exactly where a plain split on
// newlines does (blank lines dropped, surrounding space trimmed), and
// stops with EMSGSIZE at the first line over the limit.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("{\"method\":\"a\"}\n\n  {\"id\":1,\"result\":{}}\r\n"), 16)
	f.Add([]byte("no newline at the end"), 8)
	f.Add([]byte("\n\n\n"), 1)
	f.Add([]byte(strings.Repeat("x", 300)+"\nshort\n"), 64)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		if max < 1 || max > 1<<16 {
			return
		}
		var want [][]byte
		tooLong := false
		for _, line := range bytes.Split(b, []byte("\n")) {
			if len(line) > max {
				tooLong = true
				break
			}
			if l := bytes.TrimSpace(line); len(l) > 0 {
				want = append(want, l)
			}
		}
		lr := newLineReader(bytes.NewReader(b), max)
		for i := 0; ; i++ {
			line, err := lr.next()
			if err != nil {
				if i != len(want) {
					t.Fatalf("stopped after %d lines (%v), want %d", i, err, len(want))
				}
				if tooLong != (errs.CodeOf(err) == errs.EMSGSIZE) {
					t.Fatalf("end %v, line over the limit: %v", err, tooLong)
				}
				return
			}
			if i >= len(want) || !bytes.Equal(line, want[i]) {
				t.Fatalf("line %d = %q, want %q", i, line, want)
			}
		}
	})
}
