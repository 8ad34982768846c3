// Package driver defines how a model object reaches a model: a Driver turns
// a canonical request into canonical stream events. Provider wire formats
// stay inside the driver packages; nothing above them sees an API format.
package driver

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Roles a message may have.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	// RoleTool carries a tool's result back to the model (an agent's
	// loop); CallID and Name say which call it answers.
	RoleTool = "tool"
)

// ToolCall is a call an assistant message asked for.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Message is one turn of the conversation. Content is plain text; on input
// it may also be given as a list of {"type":"text","text":...} parts.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// CallID and Name are set on tool messages.
	CallID string `json:"call_id,omitempty"`
	Name   string `json:"name,omitempty"`
	// ToolCalls are the calls an assistant message asked for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// UnmarshalJSON accepts content as a string or as a list of text parts.
func (m *Message) UnmarshalJSON(b []byte) error {
	var raw struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		ToolCalls []ToolCall      `json:"tool_calls"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return errs.Wrap(errs.EINVAL, err, "message")
	}
	m.Role, m.CallID, m.Name, m.ToolCalls = raw.Role, raw.CallID, raw.Name, raw.ToolCalls
	if len(raw.Content) == 0 || string(raw.Content) == "null" {
		m.Content = ""
		return nil
	}
	if raw.Content[0] == '"' {
		return json.Unmarshal(raw.Content, &m.Content)
	}
	var parts []stream.Part
	if err := json.Unmarshal(raw.Content, &parts); err != nil {
		return errs.Wrap(errs.EINVAL, err, "message content must be a string or a list of text parts")
	}
	var b2 strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return errs.New(errs.EINVAL, "content part type %q is not supported", p.Type)
		}
		b2.WriteString(p.Text)
	}
	m.Content = b2.String()
	return nil
}

// ValidateMessages checks roles and that there is something to answer.
func ValidateMessages(ms []Message) error {
	if len(ms) == 0 {
		return errs.New(errs.EINVAL, "no messages")
	}
	for i, m := range ms {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		default:
			return errs.New(errs.EINVAL, "message %d has unknown role %q", i, m.Role)
		}
	}
	if LastUser(ms) < 0 {
		return errs.New(errs.EINVAL, "no user message")
	}
	return nil
}

// LastUser is the index of the last user message, or -1.
func LastUser(ms []Message) int {
	for i := len(ms) - 1; i >= 0; i-- {
		if ms[i].Role == RoleUser {
			return i
		}
	}
	return -1
}

// Request is one inference call.
type Request struct {
	// Model is the stable identity provider/model.
	Model    string
	Provider string
	// NativeID is what the provider calls the model (.d/id).
	NativeID string
	Messages []Message
	Defaults []object.KV
	// Caps are the model's capability words (.d/cap).
	Caps []string
	// Tools are the tools the model may call (an agent's); empty for a
	// plain model call.
	Tools []ToolDef
}

// Default looks up a .d/default value.
func (r Request) Default(key string) (string, bool) { return object.Lookup(r.Defaults, key) }

// Driver runs a request and emits body events (delta, message, reasoning,
// tool_call, usage) to out. It never emits start, error or done: the caller
// frames the run. A model driver never executes a tool; it only reports the
// tool_call the model produced. Stream returns when ctx is cancelled.
type Driver interface {
	Stream(ctx context.Context, req Request, out stream.Sink) error
}

// InProcess is implemented by drivers that compute their answer in memory
// and return at once (debug). A host needs no cancellation plumbing around
// them, such as signal handlers, which cost a thread at process start.
type InProcess interface{ InProcess() }

// Set names the drivers a build has.
type Set map[string]Driver

// Pick returns the first driver of names that this build has.
func (s Set) Pick(names []string) (string, Driver, error) {
	for _, n := range names {
		if d, ok := s[n]; ok {
			return n, d, nil
		}
	}
	return "", nil, errs.New(errs.ENOTCONF, "no available driver among %v", names)
}
