package events

import "time"

// KindCursor is the stream of one target scope's durable fair-ready cursor.
const KindCursor Kind = "cursor"

// cursorEvents declares the cursor events (see declarations).
func cursorEvents() []declaration {
	return []declaration{
		decl[CursorAdvanced](KindCursor),
	}
}

// CursorAdvanced moves a target scope's fair-ready cursor past a thread.
type CursorAdvanced struct {
	ReadyAt  time.Time `json:"ready_at"`
	ThreadID string    `json:"source_thread_id"`
	Reason   string    `json:"reason"`
}

const TypeCursorAdvanced = "cursor.advanced"

func (CursorAdvanced) EventType() string { return TypeCursorAdvanced }
