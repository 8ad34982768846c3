package daemon_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine/command/task"
	"github.com/cbth-dev/cbth/internal/errs"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
)

// The daemon composed of its modules serves every operation the table
// declares, and nothing else: each operation has one owner, the host or
// one module (a second registration would replace the first).
func TestEveryOperationIsServed(t *testing.T) {
	served := daemon.Ops(modules())
	for _, name := range api.All {
		if _, ok := served[name]; !ok {
			t.Errorf("operation %s is declared but not served", name)
		}
	}
	if len(served) != len(api.All) {
		t.Errorf("the daemon serves %d operations, api.All lists %d", len(served), len(api.All))
	}
	for _, name := range []string{api.Ping.Name, api.DaemonStatus.Name} {
		if !served[name].Passive {
			t.Errorf("%s counts as activity; looking at the daemon must not keep it up", name)
		}
	}
	seen := map[string]string{}
	for _, m := range modules() {
		t1 := api.Table{}
		m.Ops(t1)
		for name := range t1 {
			if other, ok := seen[name]; ok {
				t.Errorf("operation %s is registered by %s and by %s", name, other, m.Name())
			}
			seen[name] = m.Name()
		}
	}
	host := daemon.Ops(nil)
	for name := range host {
		if m, ok := seen[name]; ok {
			t.Errorf("operation %s is registered by the host and by %s", name, m)
		}
	}
}

// fakeModule records what the host asks of it.
type fakeModule struct {
	daemon.Base
	mu      sync.Mutex
	calls   []string
	ended   []string // jobs JobsEnded named, with the reason
	busy    bool
	left    int
	resumed bool
	ticked  chan struct{}
	h       *daemon.Host
}

func (f *fakeModule) record(c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

func (f *fakeModule) Name() string          { return "fake" }
func (f *fakeModule) Ops(api.Table)         { f.record("ops") }
func (f *fakeModule) Status(st *api.Status) { st.QueuedTasks = 7 }
func (f *fakeModule) Start(_ context.Context, h *daemon.Host) error {
	f.h = h
	f.record("start")
	return nil
}
func (f *fakeModule) Reconcile(context.Context) error { f.record("reconcile"); return nil }
func (f *fakeModule) CatchUp(context.Context) error   { f.record("catch-up"); return nil }
func (f *fakeModule) Stop(context.Context) error      { f.record("stop"); return nil }
func (f *fakeModule) KeepAlive() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.busy {
		return []string{"fake: busy"}
	}
	return nil
}
func (f *fakeModule) Tick(context.Context) {
	select {
	case f.ticked <- struct{}{}:
	default:
	}
}
func (f *fakeModule) Scheduled(context.Context) { f.record("scheduled") }
func (f *fakeModule) Swept(context.Context)     { f.record("swept") }
func (f *fakeModule) JobsEnded(_ context.Context, jobs []string, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range jobs {
		f.ended = append(f.ended, j+" "+reason)
	}
}
func (f *fakeModule) Drain(context.Context, bool) (int, bool) { f.record("drain"); return 0, true }
func (f *fakeModule) Left() (int, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.left, nil
}
func (f *fakeModule) Resume(context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resumed = true
}

func (f *fakeModule) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// The host drives a module through daemon.Module and the capabilities it
// has: its operations before the log opens, then Start, Reconcile, the
// start-up sweep's Swept and CatchUp in that order before the first
// request is served; its keep-alive reasons and status fields in daemon
// status; a tick of the loop, a sweep, a scheduling pass and a cancelled
// job reach it; a handover waits
// for its work and gives it back when the wait runs out; Stop comes
// last, once the daemon stops serving.
func TestHostDrivesItsModules(t *testing.T) {
	f := &fakeModule{ticked: make(chan struct{}, 1)}
	t.Cleanup(func() { // after the daemon stopped (cleanups run last first)
		if c := f.seen(); len(c) == 0 || c[len(c)-1] != "stop" {
			t.Errorf("the last call is not Stop: %v", c)
		}
	})
	r := startWith(t, filepath.Join(t.TempDir(), "home"), func(o *daemon.Options) { o.Modules = []daemon.Module{f} })
	if c := f.seen(); len(c) < 5 || !slices.Equal(c[:5], []string{"ops", "start", "reconcile", "swept", "catch-up"}) {
		t.Fatalf("start-up calls %v", c)
	}
	if f.h == nil || f.h.Eng == nil {
		t.Fatal("Start got no log")
	}
	st := call(r, api.DaemonStatus, api.Empty{})
	if st.QueuedTasks != 7 || slices.Contains(st.BusyReasons, "fake: busy") {
		t.Fatalf("status %+v", st)
	}
	f.mu.Lock()
	f.busy = true
	f.mu.Unlock()
	if st := call(r, api.DaemonStatus, api.Empty{}); !slices.Contains(st.BusyReasons, "fake: busy") {
		t.Fatalf("the module's keep-alive reason is not in %v", st.BusyReasons)
	}
	select {
	case <-f.ticked:
	case <-time.After(10 * time.Second):
		t.Fatal("no tick of the daemon's loop reached the module in 10 s")
	}

	before := len(f.seen())
	call(r, api.DebugClock, api.AdvanceArgs{By: "1s"}) // a sweep, then a scheduling pass
	c := f.seen()[before:]
	if i := slices.Index(c, "swept"); i < 0 || !slices.Contains(c[i:], "scheduled") {
		t.Fatalf("the sweep and then the scheduling pass did not reach the module: %v", c)
	}
	j := call(r, api.JobSubmit, api.SubmitArgs{TargetKind: "debug", SourceThreadID: "T", TaskKind: "ci", TaskSummary: "work"})
	call(r, api.JobCancel, api.JobArgs{JobID: j.JobID})
	f.mu.Lock()
	ended := slices.Clone(f.ended)
	f.mu.Unlock()
	if !slices.Equal(ended, []string{j.JobID + " " + task.StopJobCancelled}) {
		t.Fatalf("JobsEnded got %v", ended)
	}

	f.mu.Lock()
	f.left = 2
	f.mu.Unlock()
	_, err := api.DaemonHandover.Call(r.c, api.HandoverArgs{WaitMS: 50})
	if errs.CodeOf(err) != errs.ETIMEDOUT || !strings.Contains(err.Error(), "2 tasks still running") {
		t.Fatalf("handover while the module has work left: %v", err)
	}
	f.mu.Lock()
	resumed := f.resumed
	f.mu.Unlock()
	if c := f.seen(); !slices.Contains(c, "drain") || !resumed {
		t.Fatalf("the module was not drained and resumed: %v", c)
	}
}
