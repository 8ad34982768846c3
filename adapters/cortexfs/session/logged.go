package session

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"

	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
	"github.com/cbth-dev/cbth/projections/ctxsession"
)

// Log is the event log as sessions use it; the daemon implements it on
// its engine. A session's stream id is its directory's absolute path.
type Log interface {
	// Append appends payloads to the session's stream in one
	// transaction. A commandID already in the log appends nothing and
	// returns the original events with replayed true.
	Append(ctx context.Context, dir, commandID string, ps ...events.Payload) (envs []events.Envelope, replayed bool, err error)
	// Stream calls fn for every event of the session, in order.
	Stream(dir string, fn func(events.Envelope) error) error
	// Session returns the session's recorded state, or nil.
	Session(dir string) (*aggregate.CtxSession, error)
	// Sessions lists the sessions of one object, scope and user.
	Sessions(root, object, scope string, uid int) ([]*aggregate.CtxSession, error)
}

// Logged is the Store of durable sessions: every change is an event of
// the ctxsession aggregate, and the session directory and the index are
// projections of those events, written after each append (and rebuilt by
// the daemon at start). Message bodies are in the events themselves.
type Logged struct {
	Log Log
	// Root is the tree, Object the object ("agent/coder",
	// "model/debug/echo"), Dir the directory holding its sessions
	// (session/), Scope and UID whose sessions these are.
	Root, Object, Dir, Scope string
	UID                      int
	// Model goes into meta.json; Client says who opens sessions.
	Model, Client string

	mu    sync.Mutex
	cache map[string]*logged
}

type logged struct {
	state    fsm.CtxSessionState
	frames   [][]byte // encoded frames, newline included
	pending  int      // trailing frames (deltas) not yet in the log
	messages []Record
	loaded   bool
}

func (l *Logged) dir(sess string) (string, error) {
	if err := name.Valid(sess); err != nil {
		return "", errs.Wrap(errs.EINVAL, err, "session name")
	}
	if sess == ctxsession.DirIndex {
		return "", errs.New(errs.EINVAL, "session name %q is reserved for the session index", sess)
	}
	return filepath.Join(l.Dir, sess), nil
}

// get returns the session's cache, loading it from the log once.
func (l *Logged) get(sess string) (*logged, string, error) {
	d, err := l.dir(sess)
	if err != nil {
		return nil, "", err
	}
	if l.cache == nil {
		l.cache = map[string]*logged{}
	}
	c := l.cache[sess]
	if c == nil {
		c = &logged{}
		l.cache[sess] = c
	}
	if !c.loaded {
		err := l.Log.Stream(d, func(env events.Envelope) error {
			p, err := events.DecodePayload(&env)
			if err != nil {
				return err
			}
			switch p := p.(type) {
			case *events.CtxSessionMessage:
				c.messages = append(c.messages, recordOf(p))
			case *events.CtxSessionEvent:
				c.frames = append(c.frames, append(append([]byte(nil), p.Event...), '\n'))
			case *events.CtxSessionStateChanged:
				c.state = fsm.CtxSessionState(p.State)
			case *events.CtxSessionOpened:
				c.state = fsm.CtxSessionActive
			}
			return nil
		})
		if err != nil {
			return nil, "", err
		}
		c.loaded = true
	}
	return c, d, nil
}

// append records payloads (after the pending frames) and brings the
// directory and the index up to date.
func (l *Logged) append(d string, c *logged, commandID string, ps ...events.Payload) (bool, error) {
	var all []events.Payload
	for _, f := range c.frames[len(c.frames)-c.pending:] {
		all = append(all, &events.CtxSessionEvent{Event: events.RawJSON(trimNL(f))})
	}
	all = append(all, ps...)
	if len(all) == 0 {
		return false, nil
	}
	envs, replayed, err := l.Log.Append(context.Background(), d, commandID, all...)
	if err != nil {
		return false, err
	}
	c.pending = 0
	if !replayed {
		if err := l.project(d, envs); err != nil {
			return false, err
		}
	}
	return replayed, nil
}

func trimNL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		return b[:n-1]
	}
	return b
}

// project appends the new lines and rewrites the small files and the
// index from the recorded state.
func (l *Logged) project(d string, envs []events.Envelope) error {
	lines := map[string][]byte{}
	for _, env := range envs {
		f, line, err := ctxsession.Line(env)
		if err != nil {
			return err
		}
		if f != "" {
			lines[f] = append(lines[f], line...)
		}
	}
	st, err := l.Log.Session(d)
	if err != nil || st == nil {
		return err
	}
	if err := WriteSmall(d, ctxsession.Small(st)); err != nil {
		return err
	}
	for _, f := range []string{ctxsession.FileMessages, ctxsession.FileEvents} {
		if err := AppendLines(d, f, lines[f]); err != nil {
			return err
		}
	}
	return l.writeIndex()
}

func (l *Logged) writeIndex() error {
	all, err := l.Log.Sessions(l.Root, l.Object, l.Scope, l.UID)
	if err != nil {
		return err
	}
	return WriteIndex(filepath.Join(l.Dir, ctxsession.DirIndex), ctxsession.Index(all))
}

// Ensure implements Store: a new session is opened (state idle).
func (l *Logged) Ensure(sess string, o Open) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, d, err := l.get(sess)
	if err != nil {
		return err
	}
	if c.state != "" {
		return nil
	}
	if o.Cwd == "" {
		o.Cwd = "/"
	}
	client := l.Client
	if client == "" {
		client = "socket"
	}
	meta, _ := json.Marshal(struct {
		Client  string `json:"client"`
		Model   string `json:"model"`
		Object  string `json:"object"`
		Scope   string `json:"scope"`
		Session string `json:"session"`
	}{client, l.Model, l.Object, l.Scope, sess})
	if _, err := l.append(d, c, "",
		&events.CtxSessionOpened{Object: l.Object, Scope: l.Scope, Name: sess, UID: l.UID, Cwd: o.Cwd, Meta: meta, Root: l.Root},
		&events.CtxSessionStateChanged{State: string(fsm.CtxSessionIdle)}); err != nil {
		return err
	}
	c.state = fsm.CtxSessionIdle
	return nil
}

// AppendEvent implements Store. Deltas wait in memory for the next other
// frame, which takes them into the log in the same transaction: a run
// costs one append per frame that is not a delta.
func (l *Logged) AppendEvent(sess string, line []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, d, err := l.get(sess)
	if err != nil {
		return err
	}
	c.frames = append(c.frames, append([]byte(nil), line...))
	c.pending++
	var e struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(line, &e) == nil && e.Type == stream.TypeDelta {
		return nil
	}
	_, err = l.append(d, c, "")
	return err
}

// Events implements Store: from memory, pending deltas included.
func (l *Logged) Events(sess string, after uint64, fn func(uint64, stream.Event) error) error {
	l.mu.Lock()
	c, _, err := l.get(sess)
	var frames [][]byte
	if err == nil {
		frames = append(frames, c.frames...)
	}
	l.mu.Unlock()
	if err != nil {
		return err
	}
	for _, f := range frames {
		if err := eventAfter(sess, f, after, fn); err != nil {
			return err
		}
	}
	return nil
}

// LastSeq implements Store.
func (l *Logged) LastSeq(sess string) (uint64, error) { return lastSeq(l, sess) }

// AppendMessage implements Store. A user message with a client message
// id is idempotent in the log too (command id session/message id).
func (l *Logged) AppendMessage(sess string, r Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, d, err := l.get(sess)
	if err != nil {
		return err
	}
	var ps []events.Payload
	if c.state != fsm.CtxSessionActive && c.state != fsm.CtxSessionIdle {
		ps = append(ps, &events.CtxSessionStateChanged{State: string(fsm.CtxSessionActive)})
	}
	ps = append(ps, payloadOf(r))
	cmd := ""
	if r.ID != "" && r.Role == "user" {
		cmd = "ctxsession/" + d + "/" + r.ID
	}
	if _, err := l.append(d, c, cmd, ps...); err != nil {
		return err
	}
	if len(ps) == 2 {
		c.state = fsm.CtxSessionActive
	}
	c.messages = append(c.messages, r)
	return nil
}

// Messages implements Store.
func (l *Logged) Messages(sess string) ([]Record, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, _, err := l.get(sess)
	if err != nil {
		return nil, err
	}
	return append([]Record(nil), c.messages...), nil
}

// SetState implements Store; a state the session is already in appends
// nothing.
func (l *Logged) SetState(sess string, state fsm.CtxSessionState) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, d, err := l.get(sess)
	if err != nil {
		return err
	}
	var ps []events.Payload
	if state != c.state {
		ps = append(ps, &events.CtxSessionStateChanged{State: string(state)})
	}
	if _, err := l.append(d, c, "", ps...); err != nil {
		return err
	}
	c.state = state
	return nil
}

// SetLatest implements Store: latest.md follows the last assistant
// message recorded, so there is nothing to do.
func (l *Logged) SetLatest(string, string) error { return nil }
