// Package debug is the local echo driver behind model/debug/echo: no
// network, no credentials, fully deterministic output.
package debug

import (
	"context"
	"strconv"
	"strings"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
)

// Name is the driver name in .d/driver.
const Name = "debug"

// ToolPrefix starts a line of a user message that scripts a tool call:
// "!tool NAME {json arguments}". It lets an agent's whole model + tool
// loop run offline and deterministically.
const ToolPrefix = "!tool "

// Echo answers with the last user message: one delta, the whole message,
// and usage counted in whitespace-separated words (input over all messages).
//
// Scripted tool calls: when the last user message has "!tool NAME ARGS"
// lines and no tool result follows it yet, the answer is one tool_call per
// such line (call ids call-1, call-2, ...) and no text. Once tool results
// follow the last user message, the answer echoes them: their contents
// joined by newlines.
type Echo struct{}

// InProcess implements driver.InProcess: echo never waits on anything.
func (Echo) InProcess() {}

// Stream implements driver.Driver.
func (Echo) Stream(ctx context.Context, req driver.Request, out stream.Sink) error {
	if err := driver.ValidateMessages(req.Messages); err != nil {
		return err
	}
	last := driver.LastUser(req.Messages)
	text := req.Messages[last].Content
	var results []string
	for _, m := range req.Messages[last+1:] {
		if m.Role == driver.RoleTool {
			results = append(results, m.Content)
		}
	}
	var body []stream.Event
	if calls := Script(text); len(calls) > 0 && len(results) == 0 {
		for i, c := range calls {
			body = append(body, stream.ToolCall("call-"+strconv.Itoa(i+1), c.Name, string(c.Arguments)))
		}
	} else {
		if len(results) > 0 {
			text = strings.Join(results, "\n")
		}
		body = []stream.Event{stream.Delta(text), stream.Message(text)}
	}
	var in int64
	for _, m := range req.Messages {
		in += int64(len(strings.Fields(m.Content)))
	}
	body = append(body, stream.Usage(in, int64(len(strings.Fields(text)))))
	for _, e := range body {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := out.Emit(e); err != nil {
			return err
		}
	}
	return nil
}

// Script returns the tool calls a user message scripts, in order.
func Script(text string) []driver.ToolCall {
	var calls []driver.ToolCall
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), ToolPrefix)
		if !ok {
			continue
		}
		name, args, _ := strings.Cut(strings.TrimSpace(rest), " ")
		args = strings.TrimSpace(args)
		if args == "" {
			args = "{}"
		}
		calls = append(calls, driver.ToolCall{Name: name, Arguments: []byte(args)})
	}
	return calls
}
