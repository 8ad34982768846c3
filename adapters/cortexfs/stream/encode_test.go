package stream

import (
	"testing"
)

// The wire form: fields in the documented order, empty ones omitted, one
// line per event, tool-call arguments compacted.
func TestEncodeWireForm(t *testing.T) {
	in, out := int64(3), int64(5)
	for _, c := range []struct {
		e    Event
		want string
	}{
		{Event{Type: TypeDone}, `{"type":"done"}`},
		{Event{Type: TypeDelta, Run: "r1", Text: "a\nb <c>"}, `{"type":"delta","run":"r1","text":"a\nb \u003cc\u003e"}`},
		{Event{Type: TypeUsage, Run: "r", InputTokens: &in, OutputTokens: &out}, `{"type":"usage","run":"r","input_tokens":3,"output_tokens":5}`},
		{Event{Type: TypeError, Run: "r", Code: "EACCES", Message: "no"}, `{"type":"error","run":"r","code":"EACCES","message":"no"}`},
		{ToolCall("c1", "f", `{ "a" : "<x>" }`), `{"type":"tool_call","call_id":"c1","name":"f","arguments":{"a":"\u003cx\u003e"}}`},
		{ToolCall("c1", "f", `{not json`), `{"type":"tool_call","call_id":"c1","name":"f","arguments":"{not json"}`},
	} {
		got, err := Encode(c.e)
		if err != nil || string(got) != c.want+"\n" {
			t.Errorf("Encode(%+v) = %q, %v; want %s", c.e, got, err, c.want)
		}
	}
}
