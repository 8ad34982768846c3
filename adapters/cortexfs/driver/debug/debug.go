// Package debug is the local echo driver behind model/debug/echo: no
// network, no credentials, fully deterministic output.
package debug

import (
	"context"
	"strings"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
)

// Name is the driver name in .d/driver.
const Name = "debug"

// Echo answers with the last user message: one delta, the whole message,
// and usage counted in whitespace-separated words (input over all messages).
type Echo struct{}

// InProcess implements driver.InProcess: echo never waits on anything.
func (Echo) InProcess() {}

// Stream implements driver.Driver.
func (Echo) Stream(ctx context.Context, req driver.Request, out stream.Sink) error {
	if err := driver.ValidateMessages(req.Messages); err != nil {
		return err
	}
	text := req.Messages[driver.LastUser(req.Messages)].Content
	var in int64
	for _, m := range req.Messages {
		in += int64(len(strings.Fields(m.Content)))
	}
	for _, e := range []stream.Event{stream.Delta(text), stream.Message(text), stream.Usage(in, int64(len(strings.Fields(text))))} {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := out.Emit(e); err != nil {
			return err
		}
	}
	return nil
}
