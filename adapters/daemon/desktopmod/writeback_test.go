package desktopmod_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/daemon/desktopmod"
	"github.com/cbth-dev/cbth/adapters/daemon/inspectmod"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// The Desktop module on a daemon of its own (the host, this module, and
// inspectmod to read batches back), on the real socket, log and inbox
// and a manual clock: the bridge's and the caller's helpers as the
// daemon serves them.

const bridge = "bridge-thread"

type rig struct {
	*daemontest.Daemon
}

func start(t *testing.T) rig {
	t.Helper()
	return rig{daemontest.Start(t, nil, desktopmod.New(), inspectmod.New())}
}

func (r rig) head() uint64 {
	r.T.Helper()
	return daemontest.Call(r.Daemon, api.DaemonStatus, api.Empty{}).LogHeadSeq
}

// validate records a validated installation for this process's cbth.
func (r rig) validate() api.InstallationRepairReply {
	r.T.Helper()
	fp, err := inbox.Observe("test", desktop.TransportDirect)
	if err != nil {
		r.T.Fatal(err)
	}
	return daemontest.Call(r.Daemon, api.DesktopInstallationRepair, api.InstallationRepairArgs{ReadTransport: desktop.TransportDirect,
		ReadTransportCapability: events.CapValidated, WritebackCapability: events.CapValidated, Fingerprint: fp})
}

func (r rig) bind(thread string) api.BindingRepairReply {
	r.T.Helper()
	return daemontest.Call(r.Daemon, api.DesktopBindingRepair, api.BindingRepairArgs{SourceThreadID: thread, CallerAutomationID: "automation-" + thread})
}

func (r rig) preflight() api.PreflightReply {
	r.T.Helper()
	return daemontest.Call(r.Daemon, api.DesktopPreflight, api.PreflightArgs{BridgeThreadID: bridge})
}

// job submits and completes a read-only, low-risk Desktop job of thread.
func (r rig) job(thread string) string {
	r.T.Helper()
	f, tr := false, true
	j := daemontest.Call(r.Daemon, api.JobSubmit, api.SubmitArgs{TargetKind: command.TargetDesktop, SourceThreadID: thread, TaskKind: "ci", TaskSummary: "wait",
		Policy: command.PolicyFlags{ReadOnly: &tr, RequiresApproval: &f, RequiresNetwork: &f, RequiresWriteAccess: &f}})
	daemontest.Call(r.Daemon, api.JobComplete, api.CompleteArgs{JobID: j.JobID, ResultSummary: "CI is green"})
	return j.JobID
}

// ready is the first ready entry of the published snapshot (nil: none).
func (r rig) ready() *inbox.ReadyEntry {
	r.T.Helper()
	s, err := inbox.Reader{Dir: r.Home.Inbox(), Bridge: bridge}.Open()
	if err != nil {
		r.T.Fatal(err)
	}
	defer s.Close()
	fp, _ := inbox.Observe("test", desktop.TransportDirect)
	c, err := s.Claim(func(string) (string, error) { return fp, nil })
	if err != nil {
		r.T.Fatal(err)
	}
	return c.Ready
}

// readyThread makes thread's batch ready for the bridge and returns its
// entry.
func (r rig) readyThread(thread string) *inbox.ReadyEntry {
	r.T.Helper()
	r.validate()
	r.bind(thread)
	r.preflight()
	r.job(thread)
	e := r.ready()
	if e == nil || e.SourceThreadID != thread {
		r.T.Fatalf("ready %+v, want %s", e, thread)
	}
	return e
}

func armArgs(e *inbox.ReadyEntry, request, lease string) api.ArmArgs {
	return api.ArmArgs{SourceThreadID: e.SourceThreadID, AttemptID: e.AttemptID, Generation: e.Generation, BridgeRequestID: request, BridgeArmLeaseID: lease}
}

func crossArgs(e *inbox.ReadyEntry) api.BoundaryArgs {
	return api.BoundaryArgs{SourceThreadID: e.SourceThreadID, BatchID: e.BatchID, AttemptID: e.AttemptID, Generation: e.Generation,
		ExpectedSnapshotRevision: e.SnapshotRevision}
}

// refused calls f and checks its error's code (and message), and that it
// appended nothing.
func (r rig) refused(name string, code errs.Code, says string, f func() error) {
	r.T.Helper()
	before := r.head()
	err := f()
	if errs.CodeOf(err) != code || !strings.Contains(err.Error(), says) {
		r.T.Errorf("%s: %v, want %s saying %q", name, err, code, says)
	}
	if after := r.head(); after != before {
		r.T.Errorf("%s: a refusal appended: head %d -> %d", name, before, after)
	}
}

// The arm CAS and the boundary, every refusal of the two arm helpers and
// of note-boundary-crossed appending nothing: arm-pending once (a retry
// of the same request gets the same lease; another request is busy),
// arm once, the crossing only with the current token, once; then the
// next batch is offered only once the armed generation is proven
// paused, after the pause window.
func TestArmCASAndBoundary(t *testing.T) {
	r := start(t)
	e := r.readyThread("S")
	cross := func(a api.BoundaryArgs) func() error {
		return func() error { _, err := api.DesktopNoteBoundaryCrossed.Call(r.Client, a); return err }
	}
	armPending := func(a api.ArmArgs) func() error {
		return func() error { _, err := api.DesktopNoteArmPending.Call(r.Client, a); return err }
	}
	arm := func(a api.ArmArgs) func() error {
		return func() error { _, err := api.DesktopNoteArm.Call(r.Client, a); return err }
	}
	r.refused("a crossing before any arm", errs.TransientNotReady, "", cross(crossArgs(e)))

	before := r.head()
	p1 := daemontest.Call(r.Daemon, api.DesktopNoteArmPending, armArgs(e, "wake-1", ""))
	if p1.Outcome != "arm_pending" || p1.BridgeArmLeaseID == "" || r.head() != before+1 {
		t.Fatalf("note-arm-pending: %+v, %d events", p1, r.head()-before)
	}
	p2 := daemontest.Call(r.Daemon, api.DesktopNoteArmPending, armArgs(e, "wake-1", ""))
	if p2.Outcome != "already_pending" || p2.BridgeArmLeaseID != p1.BridgeArmLeaseID {
		t.Fatalf("the same request again: %+v, want lease %s", p2, p1.BridgeArmLeaseID)
	}
	stale := *e
	stale.Generation++
	other := *e
	other.AttemptID = "01a1fd8c-0000-7000-8000-000000000000"
	r.refused("arm-pending of another request", errs.EBUSY, "lease_held", armPending(armArgs(e, "wake-2", "")))
	r.refused("arm-pending of another generation", errs.ESTALE, "", armPending(armArgs(&stale, "wake-1", "")))
	r.refused("arm of another attempt", errs.ESTALE, "", arm(armArgs(&other, "wake-1", p1.BridgeArmLeaseID)))
	r.refused("arm of another request", errs.ESTALE, "", arm(armArgs(e, "wake-2", p1.BridgeArmLeaseID)))
	r.refused("arm with another lease", errs.ESTALE, "", arm(armArgs(e, "wake-1", "not-the-lease")))
	r.refused("a crossing while arm-pending", errs.TransientNotReady, "", cross(crossArgs(e)))

	a1 := daemontest.Call(r.Daemon, api.DesktopNoteArm, armArgs(e, "wake-1", p1.BridgeArmLeaseID))
	now := r.Clock.Now()
	if a1.Outcome != "armed" || a1.DeliveryAttemptCount != 1 || a1.ArmedGeneration != e.Generation ||
		a1.PauseNotBefore.Sub(now) < 90*time.Second || a1.PauseDeadline.Sub(a1.PauseNotBefore) < 90*time.Second {
		t.Fatalf("note-arm: %+v at %s", a1, now)
	}
	armed := r.head()
	a2 := daemontest.Call(r.Daemon, api.DesktopNoteArm, armArgs(e, "wake-1", p1.BridgeArmLeaseID))
	if a2.Outcome != "already_armed" || a2.DeliveryAttemptCount != 1 || r.head() != armed {
		t.Fatalf("note-arm again: %+v", a2)
	}

	for name, mut := range map[string]func(a *api.BoundaryArgs){
		"revision":   func(a *api.BoundaryArgs) { a.ExpectedSnapshotRevision++ },
		"generation": func(a *api.BoundaryArgs) { a.Generation++ },
		"batch":      func(a *api.BoundaryArgs) { a.BatchID = other.AttemptID },
		"attempt":    func(a *api.BoundaryArgs) { a.AttemptID = other.AttemptID },
	} {
		a := crossArgs(e)
		mut(&a)
		r.refused("a crossing with another "+name, errs.StaleOrSuperseded, "", cross(a))
	}
	x := daemontest.Call(r.Daemon, api.DesktopNoteBoundaryCrossed, crossArgs(e))
	if x.Outcome != "crossed" || x.BatchID != e.BatchID || x.AttemptID != e.AttemptID || x.Generation != e.Generation ||
		x.SnapshotRevision != e.SnapshotRevision || x.CloseReason != command.CloseHandoffRecorded ||
		!strings.Contains(x.Continuation.Summary, "CI is green") || len(x.Continuation.JobIDs) != 1 || x.Continuation.ArtifactIDs == nil {
		t.Fatalf("the crossing: %+v", x)
	}
	r.refused("a second crossing", errs.AlreadyCrossed, "cbth batch inspect --batch-id", cross(crossArgs(e)))
	in := daemontest.Call(r.Daemon, api.BatchInspect, api.BatchArgs{BatchID: e.BatchID})
	if in.Batch.CloseReason != command.CloseHandoffRecorded || in.Recovery == nil || in.Recovery.AttemptID != e.AttemptID {
		t.Fatalf("the batch after the handoff: %+v, envelope %+v", in.Batch, in.Recovery)
	}

	// The next batch waits for the armed generation's pause.
	r.job("S")
	r.preflight()
	if next := r.ready(); next != nil {
		t.Fatalf("offered while generation %d is not proven paused: %+v", e.Generation, next)
	}
	paused := api.PausedArgs{SourceThreadID: "S", Generation: e.Generation, BridgeRequestID: "wake-3"}
	r.refused("a pause too early", errs.EAGAIN, "pause_too_early", func() error { _, err := api.DesktopNotePaused.Call(r.Client, paused); return err })
	r.Advance(91 * time.Second)
	if p := daemontest.Call(r.Daemon, api.DesktopNotePaused, paused); p.Outcome != "quiesced" {
		t.Fatalf("note-paused: %+v", p)
	}
	r.refused("an older generation's pause", errs.ESTALE, "", func() error {
		_, err := api.DesktopNotePaused.Call(r.Client, api.PausedArgs{SourceThreadID: "S", Generation: 0, BridgeRequestID: "wake-4"})
		return err
	})
	r.preflight()
	if next := r.ready(); next == nil || next.BatchID == e.BatchID {
		t.Fatalf("the next batch is not offered: %+v", next)
	}
}
