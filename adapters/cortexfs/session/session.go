// Package session keeps model socket sessions as plain files. The Store
// interface is what the socket server needs; Files is the on-disk form under
// <root>/home/<uid>/model/<provider>/<model>.d/session/<session>/. A later
// event-log backed store can replace it behind the same interface.
package session

import (
	"bufio"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/internal/atomicfile"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// Record is one line of messages.jsonl: a user turn (with the client's
// message id and the run it started) or the assistant's answer.
type Record struct {
	ID      string `json:"id,omitempty"`
	Run     string `json:"run"`
	Role    string `json:"role"`
	Content string `json:"content"`
	// CallID and Name: a tool result (role tool). ToolCalls: an
	// assistant message of an agent that asked for tools.
	CallID    string            `json:"call_id,omitempty"`
	Name      string            `json:"name,omitempty"`
	ToolCalls []driver.ToolCall `json:"tool_calls,omitempty"`
}

// Message is the record as a conversation message.
func (r Record) Message() driver.Message {
	return driver.Message{Role: r.Role, Content: r.Content, CallID: r.CallID, Name: r.Name, ToolCalls: r.ToolCalls}
}

// RecordOf is the record of a message of run.
func RecordOf(id, run string, m driver.Message) Record {
	return Record{ID: id, Run: run, Role: m.Role, Content: m.Content, CallID: m.CallID, Name: m.Name, ToolCalls: m.ToolCalls}
}

// Scopes of a session.
const (
	ScopePrivate = "private"
	ScopeShared  = "shared"
	ScopeTemp    = "temp"
)

// Open is how a session is created when it does not exist yet.
type Open struct {
	Scope string
	// Cwd is the session's working directory, rooted in the agent root.
	Cwd string
}

// Store is the session storage the socket server uses.
type Store interface {
	// Ensure creates the session if it does not exist.
	Ensure(sess string, o Open) error
	// AppendEvent stores one encoded event frame (a JSONL line).
	AppendEvent(sess string, line []byte) error
	// Events calls fn for every stored event with sequence > after.
	Events(sess string, after uint64, fn func(seq uint64, e stream.Event) error) error
	LastSeq(sess string) (uint64, error)
	AppendMessage(sess string, r Record) error
	Messages(sess string) ([]Record, error)
	SetState(sess string, state fsm.CtxSessionState) error
	SetLatest(sess, text string) error
}

// Seq parses an event id ("e42" or "42").
func Seq(id string) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(id, "e"), 10, 64)
	if err != nil {
		return 0, errs.New(errs.EINVAL, "event id %q is not one this socket issued", id)
	}
	return n, nil
}

// EventID renders a sequence number as an event id.
func EventID(seq uint64) string { return "e" + strconv.FormatUint(seq, 10) }

// Files stores sessions under Dir (the model's .d/session directory).
type Files struct {
	Dir   string
	Model string
	Now   func() time.Time

	mu     sync.Mutex
	events map[string]*eventFile
}

// eventFile buffers appends: a run writes one line per delta, and a write
// call per line would dominate its cost. Reads flush first, so a resume
// sees every event already sent.
type eventFile struct {
	f *os.File
	w *bufio.Writer
}

// Close releases open event files.
func (f *Files) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var err error
	for k, ef := range f.events {
		err = errors.Join(err, ef.w.Flush(), ef.f.Close())
		delete(f.events, k)
	}
	return err
}

func (f *Files) dir(sess string) (string, error) {
	if err := name.Valid(sess); err != nil {
		return "", errs.Wrap(errs.EINVAL, err, "session name")
	}
	return filepath.Join(f.Dir, sess), nil
}

func (f *Files) now() string {
	t := time.Now
	if f.Now != nil {
		t = f.Now
	}
	return t().UTC().Format(time.RFC3339Nano) + "\n"
}

// Ensure implements Store.
func (f *Files) Ensure(sess string, _ Open) error {
	d, err := f.dir(sess)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(d, "created_at")); err == nil {
		return nil
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "create session %s", sess)
	}
	meta, _ := json.Marshal(map[string]string{"session": sess, "model": f.Model, "scope": "private"})
	for name, body := range map[string]string{"created_at": f.now(), "updated_at": f.now(), "state": string(fsm.CtxSessionIdle) + "\n", "meta.json": string(meta) + "\n", "latest.md": ""} {
		if err := writeAtomic(filepath.Join(d, name), []byte(body)); err != nil {
			return err
		}
	}
	for _, name := range []string{"messages.jsonl", "events.jsonl"} {
		fh, err := os.OpenFile(filepath.Join(d, name), os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return errs.Wrap(errs.EINTERNAL, err, "create %s", name)
		}
		fh.Close()
	}
	return nil
}

// writeAtomic replaces a session file (atomicfile.Write: a temp of its
// own, fsynced, renamed, the directory fsynced).
func writeAtomic(path string, b []byte) error {
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "write %s", filepath.Base(path))
	}
	return nil
}

// AppendEvent implements Store.
func (f *Files) AppendEvent(sess string, line []byte) error {
	d, err := f.dir(sess)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ef := f.events[sess]
	if ef == nil {
		fh, err := os.OpenFile(filepath.Join(d, "events.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return errs.Wrap(errs.EINTERNAL, err, "open events of %s", sess)
		}
		if f.events == nil {
			f.events = map[string]*eventFile{}
		}
		ef = &eventFile{f: fh, w: bufio.NewWriterSize(fh, 64<<10)}
		f.events[sess] = ef
	}
	if _, err := ef.w.Write(line); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "append event to %s", sess)
	}
	return nil
}

// Flush writes buffered events of sess to its file.
func (f *Files) Flush(sess string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ef := f.events[sess]; ef != nil {
		if err := ef.w.Flush(); err != nil {
			return errs.Wrap(errs.EINTERNAL, err, "flush events of %s", sess)
		}
	}
	return nil
}

// Events implements Store.
func (f *Files) Events(sess string, after uint64, fn func(uint64, stream.Event) error) error {
	d, err := f.dir(sess)
	if err != nil {
		return err
	}
	if err := f.Flush(sess); err != nil {
		return err
	}
	fh, err := os.Open(filepath.Join(d, "events.jsonl"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "open events of %s", sess)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if err := eventAfter(sess, sc.Bytes(), after, fn); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "read events of %s", sess)
	}
	return nil
}

// LastSeq implements Store.
func (f *Files) LastSeq(sess string) (uint64, error) { return lastSeq(f, sess) }

// eventAfter decodes one stored event of sess and hands it to fn when its
// sequence number is past after (Store.Events).
func eventAfter(sess string, line []byte, after uint64, fn func(uint64, stream.Event) error) error {
	var e stream.Event
	if err := json.Unmarshal(line, &e); err != nil {
		return errs.Wrap(errs.ECORRUPT, err, "events of %s", sess)
	}
	seq, err := Seq(e.ID)
	if err != nil {
		return errs.Wrap(errs.ECORRUPT, err, "events of %s", sess)
	}
	if seq <= after {
		return nil
	}
	return fn(seq, e)
}

// lastSeq is Store.LastSeq read through Events.
func lastSeq(s Store, sess string) (uint64, error) {
	var last uint64
	err := s.Events(sess, 0, func(seq uint64, _ stream.Event) error { last = seq; return nil })
	return last, err
}

// AppendMessage implements Store.
func (f *Files) AppendMessage(sess string, r Record) error {
	d, err := f.dir(sess)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(r)
	fh, err := os.OpenFile(filepath.Join(d, "messages.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "open messages of %s", sess)
	}
	defer fh.Close()
	if _, err := fh.Write(append(b, '\n')); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "append message to %s", sess)
	}
	return writeAtomic(filepath.Join(d, "updated_at"), []byte(f.now()))
}

// Messages implements Store.
func (f *Files) Messages(sess string) ([]Record, error) {
	d, err := f.dir(sess)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(d, "messages.jsonl"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, errs.Wrap(errs.EINTERNAL, err, "read messages of %s", sess)
	}
	var out []Record
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, errs.Wrap(errs.ECORRUPT, err, "messages of %s", sess)
		}
		out = append(out, r)
	}
	return out, nil
}

// SetState implements Store.
func (f *Files) SetState(sess string, state fsm.CtxSessionState) error {
	d, err := f.dir(sess)
	if err != nil {
		return err
	}
	if err := f.Flush(sess); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(d, "state"), []byte(string(state)+"\n")); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(d, "updated_at"), []byte(f.now()))
}

// SetLatest implements Store.
func (f *Files) SetLatest(sess, text string) error {
	d, err := f.dir(sess)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(d, "latest.md"), []byte(text))
}
