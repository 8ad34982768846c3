package cortexmod

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/session"
	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/projections"
	"github.com/cbth-dev/cbth/projections/ctxsession"
)

// BenchmarkStartSessions measures what a daemon start spends on the
// session directories when they are all current (the usual start):
// catchUpSessions (catchup-ms) over 100 sessions of 300 turns each (every
// turn a user and an assistant message and 13 frames, deltas included;
// 310 KB of events.jsonl and 55 KB of messages.jsonl a session). Beside it, in the same run: the check
// a start made before it compared sizes (lines-check-ms: the small files
// read and both JSONL files read to count their lines), and two physical
// references, reading every file of every session once (cat-all-ms) and
// stat-ing every file once (stat-all-ms).
func BenchmarkStartSessions(b *testing.B) {
	dir := b.TempDir()
	e, err := engine.Open(filepath.Join(dir, "cbth.db"), engine.Options{Projections: projections.Store{}, Clock: engine.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	m := &Module{h: &daemon.Host{Eng: e, Log: slog.New(slog.DiscardHandler)}}
	root := filepath.Join(dir, "ctx")
	base := filepath.Join(root, "home", "1000", "agent", "coder", "session")
	const sessions, turns = 100, 300
	for s := 0; s < sessions; s++ {
		sd := filepath.Join(base, fmt.Sprintf("s%03d", s))
		ps := []events.Payload{&events.CtxSessionOpened{Object: "agent/coder", Scope: session.ScopePrivate, Name: filepath.Base(sd), UID: 1000, Cwd: "/", Meta: events.RawJSON(`{"client":"socket"}`), Root: root}}
		for t := 0; t < turns; t++ {
			run := fmt.Sprintf("run-%d-%d", s, t)
			ps = append(ps, &events.CtxSessionMessage{Role: "user", Content: events.RawJSON(`"please look at the build output of step ` + fmt.Sprint(t) + `"`), Run: run, ID: fmt.Sprintf("m%d", t)})
			frame := func(f string) events.Payload { return &events.CtxSessionEvent{Event: events.RawJSON(f)} }
			ps = append(ps, frame(`{"type":"start","id":"e1","run":"`+run+`","model":"debug/echo"}`))
			for k := 0; k < 10; k++ {
				ps = append(ps, frame(`{"type":"delta","id":"e2","run":"`+run+`","text":"some words of the answer "}`))
			}
			ps = append(ps, frame(`{"type":"message","id":"e3","run":"`+run+`","role":"assistant","content":[{"type":"text","text":"the whole answer, about a line long"}]}`),
				frame(`{"type":"done","id":"e4","run":"`+run+`","status":"ok"}`))
			ps = append(ps, &events.CtxSessionMessage{Role: "assistant", Content: events.RawJSON(`"the whole answer, about a line long"`), Run: run})
		}
		if _, _, err := (sessionLog{m}).Append(context.Background(), sd, "", ps...); err != nil {
			b.Fatal(err)
		}
	}
	if err := m.catchUpSessions(); err != nil { // the first start writes them
		b.Fatal(err)
	}
	var files []string
	filepath.WalkDir(base, func(p string, de fs.DirEntry, err error) error {
		if err == nil && !de.IsDir() {
			files = append(files, p)
		}
		return err
	})
	var all []*aggregate.CtxSession
	if err := e.Read(func(s engine.Snapshot) error {
		return query.AllCtxSessions(s, func(c *aggregate.CtxSession) error { all = append(all, c); return nil })
	}); err != nil {
		b.Fatal(err)
	}
	var catchUp, linesCheck, catAll, statAll time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := m.catchUpSessions(); err != nil {
			b.Fatal(err)
		}
		tl := time.Now()
		catchUp += tl.Sub(t0)
		for _, c := range all {
			if !session.Current(c.ID, ctxsession.Small(c)) || session.CountLines(filepath.Join(c.ID, ctxsession.FileMessages)) != c.Messages ||
				session.CountLines(filepath.Join(c.ID, ctxsession.FileEvents)) != c.Events {
				b.Fatal("not current")
			}
		}
		linesCheck += time.Since(tl)
		t1 := time.Now()
		for _, f := range files {
			if _, err := os.ReadFile(f); err != nil {
				b.Fatal(err)
			}
		}
		t2 := time.Now()
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				b.Fatal(err)
			}
		}
		t3 := time.Now()
		catAll, statAll = catAll+t2.Sub(t1), statAll+t3.Sub(t2)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(catchUp.Microseconds())/1000/n, "catchup-ms")
	b.ReportMetric(float64(linesCheck.Microseconds())/1000/n, "lines-check-ms")
	b.ReportMetric(float64(catAll.Microseconds())/1000/n, "cat-all-ms")
	b.ReportMetric(float64(statAll.Microseconds())/1000/n, "stat-all-ms")
}
