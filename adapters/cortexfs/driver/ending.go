package driver

import "github.com/cbth-dev/cbth/adapters/cortexfs/stream"

// Ending is what a driver emits once the provider's stream has been read:
// the reasoning in one message, the tool calls held back till then, the
// text, and the token counts.
type Ending struct {
	Reasoning string
	// Calls are emitted after the reasoning; Called says tool calls were
	// emitted already, while the stream was read.
	Calls  []stream.Event
	Called bool
	Text   string
	// Usage says the provider reported its token counts, In and Out.
	Usage   bool
	In, Out int64
}

// Emit emits the ending in that order. Reasoning and text are left out
// when empty, except that a reply with no tool call always has a message,
// so a turn never ends with nothing to show.
func (e Ending) Emit(out stream.Sink) error {
	var final []stream.Event
	if e.Reasoning != "" {
		final = append(final, stream.ReasoningMessage(e.Reasoning))
	}
	final = append(final, e.Calls...)
	if e.Text != "" || (!e.Called && len(e.Calls) == 0) {
		final = append(final, stream.Message(e.Text))
	}
	if e.Usage {
		final = append(final, stream.Usage(e.In, e.Out))
	}
	for _, ev := range final {
		if err := out.Emit(ev); err != nil {
			return err
		}
	}
	return nil
}
