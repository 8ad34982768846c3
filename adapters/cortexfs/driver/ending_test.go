package driver_test

import (
	"slices"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
)

// An ending emits reasoning, the held-back calls, the text and the usage
// in that order, leaves out what is empty, and never leaves a turn with
// no tool call and no message.
func TestEndingOrderAndTheMessageNeverMissing(t *testing.T) {
	call := stream.ToolCall("c1", "read", `{}`)
	for _, c := range []struct {
		name string
		end  driver.Ending
		want []string
	}{
		{"nothing said", driver.Ending{}, []string{stream.TypeMessage}},
		{"all of it", driver.Ending{Reasoning: "r", Calls: []stream.Event{call}, Text: "t", Usage: true, In: 3, Out: 4},
			[]string{stream.TypeReasoningMessage, stream.TypeToolCall, stream.TypeMessage, stream.TypeUsage}},
		{"a held-back call only", driver.Ending{Calls: []stream.Event{call}}, []string{stream.TypeToolCall}},
		{"a call emitted while streaming", driver.Ending{Called: true, Usage: true}, []string{stream.TypeUsage}},
		{"text after a call", driver.Ending{Called: true, Text: "t"}, []string{stream.TypeMessage}},
	} {
		var got []string
		err := c.end.Emit(stream.SinkFunc(func(e stream.Event) error { got = append(got, e.Type); return nil }))
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s: emitted %v (err %v), want %v", c.name, got, err, c.want)
		}
	}
}
