package session

import (
	"encoding/json"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
)

// The line a message event renders (events.CtxSessionMessage.Line, what
// the daemon projects and counts) is the record's own JSON: daemon-served
// and plain-file sessions share one messages.jsonl format.
func TestMessageLineIsTheRecord(t *testing.T) {
	for _, r := range []Record{
		{ID: "m1", Run: "run-1", Role: "user", Content: "hello <b>&\"é\"\n"},
		{Run: "run-1", Role: "assistant", ToolCalls: []driver.ToolCall{{ID: "c1", Name: "fs.read", Arguments: json.RawMessage(`{ "path" : "a" }`)}, {ID: "c2", Name: "x"}}},
		{Run: "run-1", Role: "tool", CallID: "c1", Name: "fs.read", Content: "contents"},
	} {
		want, _ := json.Marshal(r)
		got, err := payloadOf(r).Line()
		if err != nil || string(got) != string(want)+"\n" {
			t.Errorf("line %q (%v), record %q", got, err, want)
		}
	}
}
