package aggregate

import (
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

// Thread is what the user decided for one Codex thread: its trust.
type Thread struct {
	Header[fsm.ThreadState]
	Trust string `json:"trust,omitempty"`
}

func (t *Thread) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.ThreadTrusted:
		t.Trust = p.Trust
	case *events.ThreadUntrusted:
		t.Trust = ""
	}
}
