package stream

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

func TestWriterFraming(t *testing.T) {
	cases := []struct {
		name      string
		runErr    error
		cancelled bool
		want      string
		code      errs.Code
	}{
		{"ok", nil, false, `{"type":"start","run":"r1","model":"debug/echo"}
{"type":"delta","run":"r1","text":"hello"}
{"type":"done","run":"r1","status":"ok"}
`, ""},
		{"error after start", errs.Wrap(errs.EACCES, errors.New("GET https://x?key=sk-secret"), "permission denied"), false, `{"type":"start","run":"r1","model":"debug/echo"}
{"type":"delta","run":"r1","text":"hello"}
{"type":"error","run":"r1","code":"EACCES","message":"permission denied"}
{"type":"done","run":"r1","status":"error"}
`, errs.EACCES},
		{"uncoded error is internal", errors.New("boom"), false, `{"type":"start","run":"r1","model":"debug/echo"}
{"type":"delta","run":"r1","text":"hello"}
{"type":"error","run":"r1","code":"EINTERNAL","message":"EINTERNAL"}
{"type":"done","run":"r1","status":"error"}
`, errs.EINTERNAL},
		{"cancelled", nil, true, `{"type":"start","run":"r1","model":"debug/echo"}
{"type":"delta","run":"r1","text":"hello"}
{"type":"done","run":"r1","status":"cancelled"}
`, ""},
	}
	for _, c := range cases {
		var b bytes.Buffer
		w := NewWriter(&b, "r1")
		if err := w.Start("debug/echo"); err != nil {
			t.Fatal(err)
		}
		if err := w.Emit(Delta("hello")); err != nil {
			t.Fatal(err)
		}
		code, err := w.Finish(c.runErr, c.cancelled)
		if err != nil || code != c.code {
			t.Errorf("%s: Finish = %s, %v", c.name, code, err)
		}
		if b.String() != c.want {
			t.Errorf("%s:\n%s\nwant\n%s", c.name, b.String(), c.want)
		}
		// Nothing may follow done.
		if err := w.Emit(Delta("late")); err == nil {
			t.Errorf("%s: emit after done accepted", c.name)
		}
		if strings.Contains(b.String(), "sk-secret") {
			t.Errorf("%s: cause leaked into the frame", c.name)
		}
	}
}

func TestWriterRejectsMisuse(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, "r")
	if err := w.Emit(Delta("x")); err == nil {
		t.Error("emit before start accepted")
	}
	w.Start("m")
	for _, typ := range []string{TypeStart, TypeDone, TypeError} {
		if err := w.Emit(Event{Type: typ}); err == nil {
			t.Errorf("lifecycle %s through Emit accepted", typ)
		}
	}
	if err := w.Start("m"); err == nil {
		t.Error("second start accepted")
	}
}

func TestConstructors(t *testing.T) {
	cases := map[string]Event{
		`{"type":"tool_call","call_id":"c","name":"f","arguments":{"a":1}}`:                      ToolCall("c", "f", `{"a":1}`),
		`{"type":"tool_call","call_id":"c","name":"f","arguments":"{\"a\":"}`:                    ToolCall("c", "f", `{"a":`),
		`{"type":"tool_call","call_id":"c","name":"f","arguments":{}}`:                           ToolCall("c", "f", ""),
		`{"type":"usage","input_tokens":0,"output_tokens":0}`:                                    Usage(0, 0),
		`{"type":"reasoning_delta","text":"t"}`:                                                  ReasoningDelta("t"),
		`{"type":"reasoning_message","role":"assistant","content":[{"type":"text","text":"t"}]}`: ReasoningMessage("t"),
	}
	for want, e := range cases {
		b, err := Encode(e)
		if err != nil || string(b) != want+"\n" {
			t.Errorf("Encode = %s, %v; want %s", b, err, want)
		}
	}
}
