package ctxsession_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/projections/ctxsession"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// fold applies ps to a new session as the log would, returning its state
// and its events.
func fold(t *testing.T, ps ...events.Payload) (*aggregate.CtxSession, []events.Envelope) {
	t.Helper()
	ms := fsm.New()
	var st aggregate.State
	var envs []events.Envelope
	for i, p := range ps {
		b, err := events.MarshalPayload(p)
		if err != nil {
			t.Fatal(err)
		}
		env := events.Envelope{Seq: uint64(i + 1), Stream: events.StreamID{Kind: events.KindCtxSession, ID: "/ctx/s"}, Version: uint64(i + 1),
			Type: p.EventType(), Schema: events.SchemaOf(p.EventType()), RecordedAt: t0.Add(time.Duration(i) * time.Second), Payload: b}
		if st, err = aggregate.Apply(ms, st, &env, p); err != nil {
			t.Fatalf("apply %s: %v", p.EventType(), err)
		}
		envs = append(envs, env)
	}
	return st.(*aggregate.CtxSession), envs
}

// A session directory rendered from its events: one line per message in
// messages.jsonl and per frame in events.jsonl, the small files from the
// state; the sizes the state counts are the files' sizes, which is what
// a start checks a directory by (adapters/daemon/cortexmod).
func TestRenderMatchesTheCountedSizes(t *testing.T) {
	c, envs := fold(t,
		&events.CtxSessionOpened{Object: "agent/coder", Scope: "private", Name: "alpha", Cwd: "/work", Meta: events.RawJSON(` {"model":"debug/echo"} `), Root: "/ctx"},
		&events.CtxSessionMessage{Role: "user", Content: events.RawJSON(`"read <a> \"b\" é"`), Run: "r1", ID: "m1"},
		&events.CtxSessionEvent{Event: events.RawJSON(`{"type":"start","id":"e1","run":"r1"}`)},
		&events.CtxSessionEvent{Event: events.RawJSON(` {"type":"delta","id":"e2","text":"A"} `)},
		&events.CtxSessionMessage{Role: "assistant", Content: events.RawJSON(`"A"`), Run: "r1"},
		&events.CtxSessionStateChanged{State: "idle"})
	files, err := ctxsession.Render(c, func(fn func(events.Envelope) error) error {
		for _, e := range envs {
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(files[ctxsession.FileMessages], []byte("\n")); n != 2 {
		t.Errorf("messages.jsonl has %d lines:\n%s", n, files[ctxsession.FileMessages])
	}
	if n := bytes.Count(files[ctxsession.FileEvents], []byte("\n")); n != 2 {
		t.Errorf("events.jsonl has %d lines:\n%s", n, files[ctxsession.FileEvents])
	}
	if int64(len(files[ctxsession.FileMessages])) != c.MessagesBytes || int64(len(files[ctxsession.FileEvents])) != c.EventsBytes {
		t.Errorf("the state counts %d and %d bytes, the files are %d and %d", c.MessagesBytes, c.EventsBytes,
			len(files[ctxsession.FileMessages]), len(files[ctxsession.FileEvents]))
	}
	for name, want := range map[string]string{
		ctxsession.FileState: "idle\n", ctxsession.FileCwd: "/work\n", ctxsession.FileMeta: `{"model":"debug/echo"}` + "\n",
		ctxsession.FileLatest: "A", ctxsession.FileCreatedAt: "2026-11-21T10:00:00Z\n", ctxsession.FileUpdatedAt: "2026-11-21T10:00:05Z\n",
	} {
		if got := string(files[name]); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	for _, e := range envs {
		if f, line, err := ctxsession.Line(e); err != nil || (f == "") != (line == nil) {
			t.Errorf("Line of %s: %q %q %v", e.Type, f, line, err)
		}
	}
}

// A session with no meta still gets a meta.json that is JSON.
func TestSmallWithoutMeta(t *testing.T) {
	c, _ := fold(t, &events.CtxSessionOpened{Object: "model/debug/echo", Scope: "private", Name: "s", Cwd: "/"})
	if got := string(ctxsession.Small(c)[ctxsession.FileMeta]); got != "{}\n" {
		t.Errorf("meta.json %q", got)
	}
}

// The index: every session, newest updated first (ties by name); the
// current one is the newest; each cwd names its newest session.
func TestIndex(t *testing.T) {
	s := func(name, cwd string, at int) *aggregate.CtxSession {
		c := &aggregate.CtxSession{Name: name, Cwd: cwd}
		c.UpdatedAt = t0.Add(time.Duration(at) * time.Minute)
		return c
	}
	idx := ctxsession.Index([]*aggregate.CtxSession{s("b", "/work", 1), s("a", "/work", 1), s("c", "/other", 3), s("d", "/work", 0)})
	if got := string(idx["list"]); got != "c\na\nb\nd\n" {
		t.Errorf("list %q", got)
	}
	if got := string(idx["current"]); got != "c\n" {
		t.Errorf("current %q", got)
	}
	if got := string(idx["by-cwd/"+ctxsession.CwdHash("/work")]); got != "a\n" {
		t.Errorf("the newest of /work: %q", got)
	}
	if got := string(idx["by-cwd/"+ctxsession.CwdHash("/other")]); got != "c\n" {
		t.Errorf("the newest of /other: %q", got)
	}
	if len(idx) != 4 {
		t.Errorf("index files %d, want list, current and two cwds", len(idx))
	}
	empty := ctxsession.Index(nil)
	if string(empty["list"]) != "" || string(empty["current"]) != "" {
		t.Errorf("an empty index %q", empty)
	}
	if h := ctxsession.CwdHash("/work"); len(h) != 64 || strings.ToLower(h) != h || h == ctxsession.CwdHash("/work/") {
		t.Errorf("CwdHash %q", h)
	}
}
