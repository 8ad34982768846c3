package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/session"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections/ctxsession"
)

// memLog is the event log at the Logged store's edge: appends folded
// through the real state machines, idempotent by command id, in memory.
type memLog struct {
	mu     sync.Mutex
	ms     *fsm.Machines
	seq    uint64
	envs   map[string][]events.Envelope
	states map[string]aggregate.State
	cmds   map[string][]events.Envelope
}

func newLog() *memLog {
	return &memLog{ms: fsm.New(), envs: map[string][]events.Envelope{}, states: map[string]aggregate.State{}, cmds: map[string][]events.Envelope{}}
}

func (l *memLog) Append(_ context.Context, dir, commandID string, ps ...events.Payload) ([]events.Envelope, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if envs, ok := l.cmds[commandID]; ok && commandID != "" {
		return envs, true, nil
	}
	st := l.states[dir]
	if st != nil {
		st = aggregate.Clone(st)
	}
	var out []events.Envelope
	seq, version := l.seq, uint64(len(l.envs[dir]))
	for _, p := range ps {
		b, err := events.MarshalPayload(p)
		if err != nil {
			return nil, false, err
		}
		seq++
		version++
		env := events.Envelope{Seq: seq, Stream: events.StreamID{Kind: events.KindCtxSession, ID: dir}, Version: version, Type: p.EventType(),
			Schema: events.SchemaOf(p.EventType()), RecordedAt: time.Date(2026, 11, 21, 10, 0, int(seq), 0, time.UTC), Payload: b}
		if st, err = aggregate.Apply(l.ms, st, &env, p); err != nil {
			return nil, false, err
		}
		out = append(out, env)
	}
	l.seq, l.states[dir], l.envs[dir] = seq, st, append(l.envs[dir], out...)
	if commandID != "" {
		l.cmds[commandID] = out
	}
	return out, false, nil
}

func (l *memLog) Stream(dir string, fn func(events.Envelope) error) error {
	l.mu.Lock()
	envs := append([]events.Envelope(nil), l.envs[dir]...)
	l.mu.Unlock()
	for _, e := range envs {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func (l *memLog) Session(dir string) (*aggregate.CtxSession, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, _ := l.states[dir].(*aggregate.CtxSession)
	return c, nil
}

func (l *memLog) Sessions(root, object, scope string, uid int) ([]*aggregate.CtxSession, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*aggregate.CtxSession
	for _, st := range l.states {
		if c, ok := st.(*aggregate.CtxSession); ok && c.Root == root && c.Object == object && c.Scope == scope && c.UID == uid {
			out = append(out, c)
		}
	}
	return out, nil
}

func logged(t *testing.T, log *memLog, dir string) *session.Logged {
	return &session.Logged{Log: log, Root: filepath.Dir(dir), Object: "agent/coder", Dir: dir, Scope: session.ScopePrivate, UID: os.Getuid(), Model: "debug/echo"}
}

// A conversation as a socket server writes it: a user turn, its run's
// frames, the assistant's answer with a tool call, the tool's result.
var conversation = []session.Record{
	{ID: "m1", Run: "r1", Role: driver.RoleUser, Content: "read a"},
	{Run: "r1", Role: driver.RoleAssistant, Content: "", ToolCalls: []driver.ToolCall{{ID: "c1", Name: "fs.read", Arguments: json.RawMessage(`{"path":"a"}`)}}},
	{Run: "r1", Role: driver.RoleTool, CallID: "c1", Name: "fs.read", Content: "A"},
	{Run: "r1", Role: driver.RoleAssistant, Content: "it says A"},
}

var frames = []string{
	`{"type":"start","id":"e1","run":"r1"}`,
	`{"type":"delta","id":"e2","run":"r1","text":"it says"}`,
	`{"type":"delta","id":"e3","run":"r1","text":" A"}`,
	`{"type":"done","id":"e4","run":"r1","status":"ok"}`,
}

func write(t *testing.T, st session.Store, sess string) {
	t.Helper()
	for i := range 2 { // opening twice is opening once
		if err := st.Ensure(sess, session.Open{Scope: session.ScopePrivate}); err != nil {
			t.Fatalf("ensure %d: %v", i, err)
		}
	}
	if err := st.AppendMessage(sess, conversation[0]); err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		if err := st.AppendEvent(sess, []byte(f+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range conversation[1:] {
		if err := st.AppendMessage(sess, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetState(sess, fsm.CtxSessionIdle); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, st session.Store, sess string, after uint64) ([]session.Record, []uint64, uint64) {
	t.Helper()
	msgs, err := st.Messages(sess)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	if err := st.Events(sess, after, func(seq uint64, e stream.Event) error {
		if e.ID != session.EventID(seq) {
			t.Errorf("event %q at seq %d", e.ID, seq)
		}
		seqs = append(seqs, seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	last, err := st.LastSeq(sess)
	if err != nil {
		t.Fatal(err)
	}
	return msgs, seqs, last
}

// The three stores keep one session alike: the messages as written
// (tool calls and results included), the events after a cursor, the last
// seq; a session name that could leave the directory is refused by the
// stores on disk.
func TestStoresKeepTheSameSession(t *testing.T) {
	for _, c := range []struct {
		name   string
		store  func(t *testing.T) session.Store
		onDisk bool
	}{
		{"memory", func(*testing.T) session.Store { return &session.Memory{} }, false},
		{"files", func(t *testing.T) session.Store {
			f := &session.Files{Dir: t.TempDir()}
			t.Cleanup(func() { f.Close() })
			return f
		}, true},
		{"logged", func(t *testing.T) session.Store { return logged(t, newLog(), filepath.Join(t.TempDir(), "session")) }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.store(t)
			write(t, st, "alpha")
			msgs, seqs, last := read(t, st, "alpha", 2)
			if !reflect.DeepEqual(msgs, conversation) {
				t.Errorf("messages\n%+v\nwant\n%+v", msgs, conversation)
			}
			if fmt.Sprint(seqs) != "[3 4]" || last != 4 {
				t.Errorf("events after 2: %v, last %d", seqs, last)
			}
			if other, _, _ := read(t, st, "beta", 0); len(other) != 0 {
				t.Errorf("another session holds %v", other)
			}
			if c.onDisk {
				for _, bad := range []string{"../x", "a/b", ""} {
					if err := st.Ensure(bad, session.Open{}); errs.CodeOf(err) != errs.EINVAL {
						t.Errorf("session name %q: %v", bad, err)
					}
				}
			}
		})
	}
}

// A Logged store rebuilt on the same log (a daemon started again) reads
// the same session back from its events; its directory holds the
// projection of them (messages, events, state) and the index lists it.
// A user message sent again with its id is in the log once.
func TestLoggedReadsTheLogBack(t *testing.T) {
	log, dir := newLog(), filepath.Join(t.TempDir(), "session")
	write(t, logged(t, log, dir), "alpha")
	again := logged(t, log, dir)
	msgs, seqs, last := read(t, again, "alpha", 0)
	if !reflect.DeepEqual(msgs, conversation) || len(seqs) != 4 || last != 4 {
		t.Fatalf("read back: %d messages, events %v, last %d", len(msgs), seqs, last)
	}
	sd := filepath.Join(dir, "alpha")
	if n := session.CountLines(filepath.Join(sd, ctxsession.FileMessages)); n != len(conversation) {
		t.Errorf("messages.jsonl has %d lines", n)
	}
	if n := session.CountLines(filepath.Join(sd, ctxsession.FileEvents)); n != len(frames) {
		t.Errorf("events.jsonl has %d lines", n)
	}
	if b, _ := os.ReadFile(filepath.Join(sd, ctxsession.FileState)); string(b) != "idle\n" {
		t.Errorf("state %q", b)
	}
	if ents, err := os.ReadDir(filepath.Join(dir, ctxsession.DirIndex)); err != nil || len(ents) == 0 {
		t.Errorf("the index: %v %v", ents, err)
	}
	before := len(log.envs[sd])
	if err := again.AppendMessage("alpha", conversation[0]); err != nil {
		t.Fatal(err)
	}
	if after := len(log.envs[sd]); after != before {
		t.Errorf("a user message sent again appended %d events", after-before)
	}
	if err := again.Ensure(ctxsession.DirIndex, session.Open{}); errs.CodeOf(err) != errs.EINVAL {
		t.Errorf("a session named like the index: %v", err)
	}
}

// The file store writes what a reader of the directory expects: a new
// session's files, the state and latest answer, and a damaged messages
// file is ECORRUPT, not a crash.
func TestFilesStoreLayout(t *testing.T) {
	f := &session.Files{Dir: t.TempDir(), Model: "debug/echo", Now: func() time.Time { return time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC) }}
	defer f.Close()
	if err := f.Ensure("alpha", session.Open{}); err != nil {
		t.Fatal(err)
	}
	sd := filepath.Join(f.Dir, "alpha")
	for _, name := range []string{"created_at", "updated_at", "state", "meta.json", "latest.md", "messages.jsonl", "events.jsonl"} {
		if _, err := os.Stat(filepath.Join(sd, name)); err != nil {
			t.Errorf("a new session lacks %s", name)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(sd, "created_at")); string(b) != "2026-11-21T10:00:00Z\n" {
		t.Errorf("created_at %q", b)
	}
	f.SetState("alpha", fsm.CtxSessionActive)
	f.SetLatest("alpha", "the answer")
	if b, _ := os.ReadFile(filepath.Join(sd, "state")); string(b) != "active\n" {
		t.Errorf("state %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(sd, "latest.md")); string(b) != "the answer" {
		t.Errorf("latest.md %q", b)
	}
	os.WriteFile(filepath.Join(sd, "messages.jsonl"), []byte("{not json\n"), 0o600)
	if _, err := f.Messages("alpha"); errs.CodeOf(err) != errs.ECORRUPT {
		t.Errorf("a damaged messages file: %v", err)
	}
}

// The index holds exactly what it is given: a by-cwd entry no longer
// wanted goes; Current tells a directory that already holds its files.
func TestIndexAndCurrent(t *testing.T) {
	dir := t.TempDir()
	if err := session.WriteIndex(dir, map[string][]byte{"sessions.json": []byte("[]\n"), "by-cwd/aa": []byte("x\n"), "by-cwd/bb": []byte("y\n")}); err != nil {
		t.Fatal(err)
	}
	if err := session.WriteIndex(dir, map[string][]byte{"sessions.json": []byte("[1]\n"), "by-cwd/bb": []byte("y\n")}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "by-cwd"))
	if len(ents) != 1 || ents[0].Name() != "bb" {
		t.Errorf("by-cwd holds %v", ents)
	}
	sd := filepath.Join(t.TempDir(), "s")
	files := map[string][]byte{"state": []byte("idle\n")}
	if session.Current(sd, files) {
		t.Error("a missing directory is current")
	}
	if err := session.WriteSmall(sd, files); err != nil {
		t.Fatal(err)
	}
	if !session.Current(sd, files) || session.Current(sd, map[string][]byte{"state": []byte("done\n")}) {
		t.Error("Current does not tell the files")
	}
	if session.CountLines(filepath.Join(sd, "nope")) != -1 {
		t.Error("a missing file has lines")
	}
	if _, err := session.Seq("x1"); errs.CodeOf(err) != errs.EINVAL || !strings.HasPrefix(session.EventID(7), "e") {
		t.Errorf("Seq of a foreign id: %v", err)
	}
}
