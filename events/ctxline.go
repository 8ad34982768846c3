package events

import (
	"bytes"
	"encoding/json"
)

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
