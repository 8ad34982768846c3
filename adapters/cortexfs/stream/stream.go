// Package stream holds the canonical CortexFS JSONL event stream: the event
// types every model, agent and socket speaks, and a writer that keeps the
// start ... done framing honest when something fails half way.
package stream

import (
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Event types of stream v1.
const (
	TypeStart            = "start"
	TypeDelta            = "delta"
	TypeMessage          = "message"
	TypeReasoningDelta   = "reasoning_delta"
	TypeReasoningMessage = "reasoning_message"
	TypeToolCall         = "tool_call"
	TypeUsage            = "usage"
	TypeError            = "error"
	TypeDone             = "done"
	// TypePong answers a socket ping; it belongs to the socket protocol,
	// not to a run.
	TypePong = "pong"
)

// Done statuses.
const (
	StatusOK        = "ok"
	StatusError     = "error"
	StatusCancelled = "cancelled"
	// StatusInterrupted ends a run that the daemon serving it did not
	// live to end: written at the next start (adapters/daemon/cortexmod/session.go).
	StatusInterrupted = "interrupted"
)

// Part is one element of a message's content.
type Part struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Event is one JSONL frame. Field order here is the order on the wire.
// Optional fields are omitted when empty so every type prints only what it
// carries.
type Event struct {
	Type  string `json:"type"`
	ID    string `json:"id,omitempty"` // event id; sockets only
	Run   string `json:"run,omitempty"`
	Model string `json:"model,omitempty"`
	Role  string `json:"role,omitempty"`
	Text  string `json:"text,omitempty"`
	// Content of message and reasoning_message events.
	Content []Part `json:"content,omitempty"`
	// tool_call: the model asks for a call; nothing executes it here.
	CallID    string          `json:"call_id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// usage
	InputTokens  *int64 `json:"input_tokens,omitempty"`
	OutputTokens *int64 `json:"output_tokens,omitempty"`
	// error
	Code    errs.Code `json:"code,omitempty"`
	Message string    `json:"message,omitempty"`
	// done
	Status string `json:"status,omitempty"`
}

// Delta, Message and the other constructors keep drivers short.
func Delta(text string) Event { return Event{Type: TypeDelta, Text: text} }

// ReasoningDelta is a piece of reasoning text.
func ReasoningDelta(text string) Event { return Event{Type: TypeReasoningDelta, Text: text} }

// Message is a whole assistant message.
func Message(text string) Event {
	return Event{Type: TypeMessage, Role: "assistant", Content: []Part{{Type: "text", Text: text}}}
}

// ReasoningMessage is the whole reasoning text of a run.
func ReasoningMessage(text string) Event {
	return Event{Type: TypeReasoningMessage, Role: "assistant", Content: []Part{{Type: "text", Text: text}}}
}

// ToolCall builds a tool_call event. Arguments that are not valid JSON are
// carried as a JSON string so the frame stays parseable.
func ToolCall(callID, name, args string) Event {
	raw := json.RawMessage(args)
	if args == "" {
		raw = json.RawMessage("{}")
	} else if !json.Valid(raw) {
		b, _ := json.Marshal(args)
		raw = b
	}
	return Event{Type: TypeToolCall, CallID: callID, Name: name, Arguments: raw}
}

// Usage reports token counts.
func Usage(in, out int64) Event {
	return Event{Type: TypeUsage, InputTokens: &in, OutputTokens: &out}
}

// Sink receives the events of one run. A blocking Emit is backpressure.
type Sink interface {
	Emit(Event) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(Event) error

// Emit calls f.
func (f SinkFunc) Emit(e Event) error { return f(e) }

// Writer frames one run on an io.Writer: start first, done last, and any
// failure after start as an error frame followed by done with status error.
// It is safe for concurrent use.
type Writer struct {
	mu       sync.Mutex
	w        io.Writer
	run      string
	started  bool
	finished bool
	status   string
	code     errs.Code
}

// NewWriter returns a writer for run id run.
func NewWriter(w io.Writer, run string) *Writer { return &Writer{w: w, run: run} }

// Start writes the start frame.
func (w *Writer) Start(model string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errs.New(errs.EINTERNAL, "run %s already started", w.run)
	}
	w.started = true
	return w.write(Event{Type: TypeStart, Run: w.run, Model: model})
}

// Emit writes a body event of the run. Lifecycle frames (start, error,
// done) go through Start and Finish so the framing cannot be broken.
func (w *Writer) Emit(e Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.started:
		return errs.New(errs.EINTERNAL, "event %s before start", e.Type)
	case w.finished:
		return errs.New(errs.EINTERNAL, "event %s after done", e.Type)
	}
	switch e.Type {
	case TypeStart, TypeDone, TypeError:
		return errs.New(errs.EINTERNAL, "lifecycle event %s through Emit", e.Type)
	}
	e.Run = w.run
	return w.write(e)
}

// Finish ends the run. A nil err gives done/ok; a cancelled run gives
// done/cancelled; any other error an error frame with its stable code and
// then done/error. It returns the code that summarizes the run.
func (w *Writer) Finish(runErr error, cancelled bool) (errs.Code, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return w.code, nil
	}
	w.finished = true
	var werr error
	switch {
	case cancelled:
		w.status = StatusCancelled
	case runErr == nil:
		w.status = StatusOK
	default:
		w.status = StatusError
		w.code = errs.CodeOf(runErr)
		werr = w.write(Event{Type: TypeError, Run: w.run, Code: w.code, Message: PublicMessage(runErr)})
	}
	if err := w.write(Event{Type: TypeDone, Run: w.run, Status: w.status}); err != nil && werr == nil {
		werr = err
	}
	return w.code, werr
}

// Status is the done status written, or "" before Finish.
func (w *Writer) Status() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

func (w *Writer) write(e Event) error {
	b, err := Encode(e)
	if err != nil {
		return err
	}
	if _, err := w.w.Write(b); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "write %s frame", e.Type)
	}
	return nil
}

// PublicMessage is the message shown for err in an error frame: the text of
// the outermost coded error. Causes below it may carry transport detail, so
// they stay out.
func PublicMessage(err error) string {
	var e *errs.Error
	if errors.As(err, &e) && e.Message != "" {
		return e.Message
	}
	return string(errs.CodeOf(err))
}
