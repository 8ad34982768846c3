package cortexmod

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/session"
	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/projections"
	"github.com/cbth-dev/cbth/projections/ctxsession"
)

// A start checks a session's JSONL files by their sizes (the aggregate
// counts the bytes its events render to) and its small files by their
// contents: a JSONL file extended, truncated, replaced by a directory or
// deleted, or a small file edited in place, is rewritten from the log;
// a current directory is left alone.
func TestCatchUpSessionsChecksSizes(t *testing.T) {
	dir := t.TempDir()
	e, err := engine.Open(filepath.Join(dir, "cbth.db"), engine.Options{Projections: projections.Store{}, Clock: engine.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m := &Module{h: &daemon.Host{Eng: e, Log: slog.New(slog.DiscardHandler)}}
	root := filepath.Join(dir, "ctx")
	sd := filepath.Join(root, "home", "1000", "agent", "coder", "session", "alpha")
	if _, _, err := (sessionLog{m}).Append(context.Background(), sd, "",
		&events.CtxSessionOpened{Object: "agent/coder", Scope: session.ScopePrivate, Name: "alpha", UID: 1000, Cwd: "/", Root: root},
		&events.CtxSessionMessage{Role: "user", Content: events.RawJSON(`"read <the> \"file\" é"`), Run: "run-1", ID: "m1"},
		&events.CtxSessionEvent{Event: events.RawJSON(` {"type":"tool_call","run":"run-1","call_id":"c1","name":"fs.read","arguments":{"path":"a"}} `)},
		&events.CtxSessionMessage{Role: "assistant", Content: events.RawJSON(`""`), Run: "run-1",
			ToolCalls: events.RawJSON(`[{"id":"c1","name":"fs.read","arguments":{ "path" : "a" }}]`)},
		&events.CtxSessionEvent{Event: events.RawJSON(`{"type":"done","run":"run-1","status":"ok"}`)},
		&events.CtxSessionStateChanged{State: "idle"}); err != nil {
		t.Fatal(err)
	}
	if err := m.catchUpSessions(); err != nil {
		t.Fatal(err)
	}
	read := func() map[string]string {
		out := map[string]string{}
		for _, f := range []string{ctxsession.FileMessages, ctxsession.FileEvents, ctxsession.FileState, ctxsession.FileLatest} {
			b, _ := os.ReadFile(filepath.Join(sd, f))
			out[f] = string(b)
		}
		return out
	}
	want := read()
	if want[ctxsession.FileEvents] == "" || want[ctxsession.FileMessages] == "" || want[ctxsession.FileState] != "idle\n" {
		t.Fatalf("first projection: %q", want)
	}
	for name, damage := range map[string]func(){
		"events extended": func() { session.AppendLines(sd, ctxsession.FileEvents, []byte(`{"type":"delta"}`+"\n")) },
		"messages truncated": func() {
			os.Truncate(filepath.Join(sd, ctxsession.FileMessages), int64(len(want[ctxsession.FileMessages])-1))
		},
		"events deleted": func() { os.Remove(filepath.Join(sd, ctxsession.FileEvents)) },
		"messages a dir": func() {
			os.Remove(filepath.Join(sd, ctxsession.FileMessages))
			os.Mkdir(filepath.Join(sd, ctxsession.FileMessages), 0o700)
		},
		// Same line count, other size: a line count alone missed it.
		"messages edited": func() {
			os.WriteFile(filepath.Join(sd, ctxsession.FileMessages), []byte(strings.Replace(want[ctxsession.FileMessages], "read", "rea", 1)), 0o600)
		},
		"state same size": func() { os.WriteFile(filepath.Join(sd, ctxsession.FileState), []byte("done\n"), 0o600) },
	} {
		damage()
		if name == "messages a dir" {
			// A directory in the way is not a file to overwrite: the
			// check must not call it current; remove it as an operator would.
			if sizesCurrent(sd, mustSession(t, m, sd)) {
				t.Fatalf("%s: counted as current", name)
			}
			os.Remove(filepath.Join(sd, ctxsession.FileMessages))
		}
		if err := m.catchUpSessions(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := read(); got[ctxsession.FileMessages] != want[ctxsession.FileMessages] || got[ctxsession.FileEvents] != want[ctxsession.FileEvents] || got[ctxsession.FileState] != want[ctxsession.FileState] {
			t.Errorf("%s: not repaired: %q", name, got)
		}
	}
}

func mustSession(t *testing.T, m *Module, dir string) *aggregate.CtxSession {
	t.Helper()
	c, err := (sessionLog{m}).Session(dir)
	if err != nil || c == nil {
		t.Fatalf("session %s: %v", dir, err)
	}
	return c
}
