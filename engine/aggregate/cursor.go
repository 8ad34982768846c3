package aggregate

import (
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

// Cursor is a target scope's durable fair-ready cursor: the position
// (first ready time, thread) of the last thread served.
type Cursor struct {
	Header[fsm.CursorState]
	ReadyAt  time.Time `json:"ready_at"`
	ThreadID string    `json:"source_thread_id"`
	Reason   string    `json:"reason"`
}

func (c *Cursor) mutate(e *events.Envelope, p events.Payload) {
	if p, ok := p.(*events.CursorAdvanced); ok {
		c.ReadyAt, c.ThreadID, c.Reason = p.ReadyAt, p.ThreadID, p.Reason
	}
}
