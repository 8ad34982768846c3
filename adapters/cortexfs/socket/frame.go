// Package socket serves a model's name.sock: JSONL request frames in,
// canonical event frames out, multi-turn sessions kept in a session.Store.
package socket

import (
	"encoding/json"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/session"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// MaxFrame is the largest frame, newline excluded, in protocol v1.
const MaxFrame = 1 << 20

// Ops.
const (
	OpSend   = "send"
	OpResume = "resume"
	OpCancel = "cancel"
	OpPing   = "ping"
)

// DefaultSession is used when a frame names none.
const DefaultSession = "default"

// Request is one client frame. Unknown fields are ignored.
type Request struct {
	Op       string           `json:"op"`
	ID       string           `json:"id"`
	Session  string           `json:"session"`
	Cwd      string           `json:"cwd"`
	Scope    string           `json:"scope"`
	Input    *string          `json:"input"`
	Messages []driver.Message `json:"messages"`
	After    string           `json:"after"`
}

// ParseRequest decodes and checks one frame. Every failure is EINVAL.
func ParseRequest(b []byte) (Request, error) {
	var r Request
	if err := json.Unmarshal(b, &r); err != nil {
		return Request{}, errs.New(errs.EINVAL, "frame is not a JSON object")
	}
	switch r.Op {
	case OpPing:
	case OpSend:
		if r.Input == nil && len(r.Messages) == 0 {
			return Request{}, errs.New(errs.EINVAL, "send needs input or messages")
		}
		if r.Input != nil {
			r.Messages = append(r.Messages, driver.Message{Role: driver.RoleUser, Content: *r.Input})
		}
		if err := driver.ValidateMessages(r.Messages); err != nil {
			return Request{}, err
		}
	case OpResume:
	case OpCancel:
		if r.ID == "" {
			return Request{}, errs.New(errs.EINVAL, "cancel needs the run id")
		}
	case "":
		return Request{}, errs.New(errs.EINVAL, "frame has no op")
	default:
		return Request{}, errs.New(errs.EINVAL, "unknown op %q", r.Op)
	}
	if r.Op == OpSend || r.Op == OpResume {
		if r.Session == "" {
			r.Session = DefaultSession
		}
		switch r.Scope {
		case "":
			r.Scope = session.ScopePrivate
		case session.ScopePrivate, session.ScopeShared, session.ScopeTemp:
		default:
			return Request{}, errs.New(errs.EINVAL, "scope must be private, shared or temp, not %q", r.Scope)
		}
		if err := name.Valid(r.Session); err != nil {
			return Request{}, errs.Wrap(errs.EINVAL, err, "session")
		}
	}
	return r, nil
}
