package aggregate

import (
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// CtxSession is a CortexFS session directory.
type CtxSession struct {
	Header[fsm.CtxSessionState]
	Object     string         `json:"object"`
	Scope      string         `json:"scope"`
	Name       string         `json:"name"`
	UID        int            `json:"uid"`
	Cwd        string         `json:"cwd"`
	Meta       events.RawJSON `json:"meta,omitempty"`
	Messages   int            `json:"messages"`
	Events     int            `json:"events"`
	LatestText string         `json:"latest_text,omitempty"`
	Root       string         `json:"root,omitempty"`
	// MessagesBytes and EventsBytes are the sizes messages.jsonl and
	// events.jsonl have when current: a start checks a directory by
	// stat instead of reading its history (adapters/daemon/cortexmod/session.go).
	MessagesBytes int64 `json:"messages_bytes"`
	EventsBytes   int64 `json:"events_bytes"`
}

func (c *CtxSession) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.CtxSessionOpened:
		c.Object, c.Scope, c.Name, c.UID, c.Cwd, c.Meta, c.Root = p.Object, p.Scope, p.Name, p.UID, p.Cwd, p.Meta, p.Root
	case *events.CtxSessionMessage:
		c.Messages++
		if l, err := p.Line(); err == nil {
			c.MessagesBytes += int64(len(l))
		}
		if p.Role == "assistant" && len(p.ToolCalls) == 0 {
			c.LatestText = textOf(p.Content)
		}
	case *events.CtxSessionEvent:
		c.Events++
		c.EventsBytes += int64(len(p.Line()))
	}
}

// Indexes implements Indexer.
func (c *CtxSession) Indexes() []IndexEntry {
	return []IndexEntry{{index.CtxSession, index.CtxSessionKey(c.Root, c.Object, c.Scope, c.UID, c.Name)}}
}
