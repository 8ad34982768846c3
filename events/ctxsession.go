package events

import (
	"bytes"
	"encoding/json"
)

// KindCtxSession is the stream of one CortexFS session directory, by its absolute path.
const KindCtxSession Kind = "ctxsession"

// ctxSessionEvents declares the ctxsession events (see declarations).
func ctxSessionEvents() []declaration {
	return []declaration{
		decl[CtxSessionOpened](KindCtxSession),
		decl[CtxSessionMessage](KindCtxSession),
		decl[CtxSessionEvent](KindCtxSession),
		decl[CtxSessionStateChanged](KindCtxSession),
	}
}

// CtxSessionOpened creates a session directory.
// The stream id is the session directory's absolute path.
type CtxSessionOpened struct {
	Object string  `json:"object"` // e.g. "agent/coder" or "model/openai/gpt-4o"
	Scope  string  `json:"scope"`
	Name   string  `json:"name"`
	UID    int     `json:"uid"`
	Cwd    string  `json:"cwd"`
	Meta   RawJSON `json:"meta,omitempty"`
	// Root is the CortexFS tree the session belongs to.
	Root string `json:"root,omitempty"`
}

const TypeCtxSessionOpened = "ctxsession.opened"

func (CtxSessionOpened) EventType() string { return TypeCtxSessionOpened }

// CtxSessionMessage appends one conversation message.
type CtxSessionMessage struct {
	Role    string  `json:"role"`
	Content RawJSON `json:"content"`
	Run     string  `json:"run,omitempty"`
	// ID is the client's message id (a user turn); CallID and Name a
	// tool result's call; ToolCalls the calls an assistant message asked
	// for.
	ID        string  `json:"id,omitempty"`
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
	ToolCalls RawJSON `json:"tool_calls,omitempty"`
}

const TypeCtxSessionMessage = "ctxsession.message"

func (CtxSessionMessage) EventType() string { return TypeCtxSessionMessage }

// CtxSessionEvent appends a tool call, error or other non-message event.
type CtxSessionEvent struct {
	Event RawJSON `json:"event"`
}

const TypeCtxSessionEvent = "ctxsession.event"

func (CtxSessionEvent) EventType() string { return TypeCtxSessionEvent }

// CtxSessionStateChanged moves the session between active, idle, done and
// error.
type CtxSessionStateChanged struct {
	State string `json:"state"`
}

const TypeCtxSessionStateChanged = "ctxsession.state_changed"

func (CtxSessionStateChanged) EventType() string { return TypeCtxSessionStateChanged }

// Line is the line this message adds to its session directory's
// messages.jsonl. It is the one rendering: the directory projection
// (adapters/cortexfs/session) writes it and the ctxsession aggregate
// counts its bytes, so a start can tell a current file by its size.
func (m *CtxSessionMessage) Line() ([]byte, error) {
	type call struct {
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
	}
	r := struct {
		ID        string `json:"id,omitempty"`
		Run       string `json:"run"`
		Role      string `json:"role"`
		Content   string `json:"content"`
		CallID    string `json:"call_id,omitempty"`
		Name      string `json:"name,omitempty"`
		ToolCalls []call `json:"tool_calls,omitempty"`
	}{ID: m.ID, Run: m.Run, Role: m.Role, CallID: m.CallID, Name: m.Name}
	if err := json.Unmarshal(m.Content, &r.Content); err != nil {
		return nil, err
	}
	if len(m.ToolCalls) > 0 {
		if err := json.Unmarshal(m.ToolCalls, &r.ToolCalls); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(r)
	return append(b, '\n'), err
}

// Line is the line this frame adds to its session directory's
// events.jsonl.
func (e *CtxSessionEvent) Line() []byte {
	return append(bytes.TrimSpace(e.Event), '\n')
}
