package daemon_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/desktopsim"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/projections"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// The Desktop snapshots published by a real daemon (in this process, on
// the real socket and log, on a manual clock).

// desktopDaemon starts a daemon with a validated installation for this
// process's cbth (version "test"). It does not fsync: these tests are
// about what readers see, not about surviving power loss.
func desktopDaemon(t *testing.T) *running {
	t.Helper()
	r := startWith(t, filepath.Join(t.TempDir(), "home"), func(o *daemon.Options) { o.NoSync = true })
	fp, err := inbox.Observe("test", desktop.TransportDirect)
	if err != nil {
		t.Fatal(err)
	}
	call(r, api.DesktopInstallationRepair, api.InstallationRepairArgs{ReadTransport: desktop.TransportDirect,
		ReadTransportCapability: events.CapValidated, WritebackCapability: events.CapValidated, Fingerprint: fp})
	return r
}

func (r *running) lowRiskJob(thread string) {
	r.t.Helper()
	f := false
	tr := true
	j := call(r, api.JobSubmit, api.SubmitArgs{TargetKind: command.TargetDesktop, SourceThreadID: thread, TaskKind: "ci", TaskSummary: "work",
		Policy: command.PolicyFlags{ReadOnly: &tr, RequiresApproval: &f, RequiresNetwork: &f, RequiresWriteAccess: &f}})
	call(r, api.JobComplete, api.CompleteArgs{JobID: j.JobID, ResultSummary: "done"})
}

func (r *running) inbox() string { return filepath.Join(r.root, "inbox") }

// A reader hammering the manifest and its files while the daemon
// publishes 1,000 revisions never sees two revisions mixed: every file it
// reads carries the manifest's revision, and the files agree with each
// other.
func TestDesktop_SnapshotConsistencyUnderPublication(t *testing.T) {
	r := desktopDaemon(t)
	call(r, api.DesktopBindingRepair, api.BindingRepairArgs{SourceThreadID: "S", CallerAutomationID: "A0"})
	call(r, api.DesktopBindingRepair, api.BindingRepairArgs{SourceThreadID: "U", CallerAutomationID: "U0"})
	call(r, api.DesktopPreflight, api.PreflightArgs{BridgeThreadID: "B"})
	r.lowRiskJob("S")
	r.lowRiskJob("U")

	stop := make(chan struct{})
	var reads, revisions atomic.Int64
	var mu sync.Mutex
	var problems []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := uint64(0)
		for {
			select {
			case <-stop:
				return
			default:
			}
			d, err := desktopsim.ReadDirect(r.inbox(), "B")
			problem := ""
			switch {
			case err != nil:
				problem = err.Error()
			default:
				for _, e := range d.Ready.Entries {
					i := slices.IndexFunc(d.Bindings.Entries, func(b inbox.BindingEntry) bool { return b.SourceThreadID == e.SourceThreadID })
					if i < 0 || d.Bindings.Entries[i].ReadTransportGeneration != d.Installation.ReadTransportGeneration {
						problem = fmt.Sprintf("revision %d: ready %s without its binding", d.Manifest.SnapshotRevision, e.SourceThreadID)
					}
				}
			}
			if problem != "" {
				mu.Lock()
				problems = append(problems, problem)
				mu.Unlock()
				continue
			}
			reads.Add(1)
			if d.Manifest.SnapshotRevision != last {
				last = d.Manifest.SnapshotRevision
				revisions.Add(1)
			}
		}
	}()
	first := call(r, api.DesktopPreflight, api.PreflightArgs{BridgeThreadID: "B"}).SnapshotRevision
	for i := 1; i <= 1000; i++ {
		// Each replacement supersedes S's offered attempt: a new revision.
		call(r, api.DesktopBindingRepair, api.BindingRepairArgs{SourceThreadID: "S", CallerAutomationID: fmt.Sprintf("A%d", i)})
	}
	last := call(r, api.DesktopPreflight, api.PreflightArgs{BridgeThreadID: "B"}).SnapshotRevision
	close(stop)
	wg.Wait()
	if len(problems) > 0 {
		t.Fatalf("%d inconsistent reads in %d, e.g. %s", len(problems), reads.Load()+int64(len(problems)), problems[0])
	}
	if last-first < 1000 || reads.Load() < 100 {
		t.Fatalf("%d publications, %d consistent reads seeing %d revisions: the test shows too little", last-first, reads.Load(), revisions.Load())
	}
	t.Logf("%d publications, %d reads, %d revisions seen", last-first, reads.Load(), revisions.Load())
}

// With 1,000 bound threads ready, the published order rotates exactly by
// the durable per-bridge cursor: serving (here, skipping) a thread puts
// it last and leaves everyone else's turn as it was, publication after
// publication, and a full cycle serves every thread once.
func TestDesktop_FairRoundRobinAcrossPublications(t *testing.T) {
	const n = 1000
	thread := func(i int) string { return fmt.Sprintf("T%04d", i) }
	// The log is written before the daemon starts: through the socket,
	// each of these 4,000 commands would run a scheduling pass.
	root := filepath.Join(t.TempDir(), "home")
	h := home.Home{Root: root}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(h.DB(), engine.Options{Projections: projections.Store{}, Clock: engine.NewManualClock(t0), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := inbox.Observe("test", desktop.TransportDirect)
	if err != nil {
		t.Fatal(err)
	}
	cfg := command.DeliveryConfig{MaxJobsPerBatch: 8, MaxTotalBytes: 1 << 20, Cooldown: time.Minute, RedeliveryWindow: 24 * time.Hour,
		MaxDeliveryAttempts: 5, EligibleBackoff: time.Minute, InlinePayloadLimit: 1 << 10, ObservationWindow: time.Hour}
	exec := func(d engine.Decider) engine.Result {
		res, err := e.Execute(context.Background(), engine.Meta{Actor: events.ActorOperator}, d)
		if err != nil {
			t.Fatalf("%T: %v", d, err)
		}
		return res
	}
	exec(desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, ReadCap: events.CapValidated, WritebackCap: events.CapValidated, Fingerprint: fp})
	exec(desktop.SelectBridge{BridgeThreadID: "B"})
	for i := range n {
		exec(desktop.RepairBinding{ThreadID: thread(i), AutomationID: "A" + thread(i)})
		j, _ := enginetest.Answer[string](t, e, engine.Meta{Actor: events.ActorOperator}, command.SubmitJob{Target: command.TargetDesktop, ThreadID: thread(i), TaskKind: "ci", Summary: "s", Policy: events.DeliveryPolicy{ReadOnly: true}})
		exec(command.CompleteJob{Config: cfg, JobID: j, Summary: "done"})
		exec(command.PrepareAttempt{Config: cfg, ThreadID: thread(i), DeliveryMode: command.ModeDesktop})
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	r := startWith(t, root, func(o *daemon.Options) { o.NoSync = true })
	order := func() []string {
		t.Helper()
		d, err := desktopsim.ReadDirect(r.inbox(), "B")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range d.Ready.Entries {
			out = append(out, e.SourceThreadID)
		}
		return out
	}
	want := make([]string, n)
	for i := range n {
		want[i] = thread(i) // ready in submission order: first ready time
	}
	check := func(step string) {
		t.Helper()
		if got := order(); !slices.Equal(got, want) {
			t.Fatalf("%s: order starts %v, want %v", step, got[:min(5, len(got))], want[:5])
		}
	}
	check("first publication")
	served := map[string]int{}
	serve := func(th string) {
		t.Helper()
		if rep := call(r, api.BatchSkipHead, api.ThreadArgs{SourceThreadID: th}); rep.Outcome != "skipped" {
			t.Fatalf("skip %s: %+v", th, rep)
		}
		i := slices.Index(want, th)
		// The cursor passes th: the order starts just after it.
		want = append(slices.Clone(want[i+1:]), want[:i+1]...)
	}
	// A bridge serves the first ready thread each wake.
	for step := range 120 {
		first := order()[0]
		served[first]++
		serve(first)
		check(fmt.Sprintf("after serving %d threads", step+1))
	}
	for th, k := range served {
		if k != 1 {
			t.Fatalf("%s served %d times in 120 wakes", th, k)
		}
	}
	// The cursor may be anywhere: past the last thread it wraps around.
	serve(thread(n - 1))
	check("after the last thread")
	if order()[0] != thread(0) {
		t.Fatal("the order did not wrap around")
	}
	serve(thread(499))
	check("after a thread in the middle")
}

// The target's answers through the daemon: preflight before any
// installation state is refused, and the snapshot is published only once
// a bridge thread is selected.
func TestDesktop_PreflightNeedsAnInstallation(t *testing.T) {
	r := start(t, filepath.Join(t.TempDir(), "home"))
	if _, err := api.DesktopPreflight.Call(r.c, api.PreflightArgs{BridgeThreadID: "B"}); errs.CodeOf(err) != errs.ESTATE {
		t.Fatalf("preflight without an installation: %v", err)
	}
	if _, err := desktopsim.ReadDirect(r.inbox(), "B"); errs.CodeOf(err) != errs.ENOENT {
		t.Fatalf("a snapshot without a bridge: %v", err)
	}
}
