package desktop_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

const marker1, marker2 = "cbthq-0123456789abcdef", "cbthq-fedcba9876543210"

func startQueue(thread, marker string, window time.Duration) desktop.StartQueueValidation {
	return desktop.StartQueueValidation{ThreadID: thread, Marker: marker, QueuedItemID: "item-" + marker[min(6, len(marker)):min(10, len(marker))], CodexHome: "/codex",
		RolloutPath: "/codex/sessions/rollout-" + thread + ".jsonl", StartOffset: 10, Window: window}
}

// A live validation of the queue transport: refused (appending nothing)
// before the installation is set up, for a thread never bound, unbound
// or degraded, and for a window out of bounds; open, then validated by
// its own marker within the window (again: already_validated); a later
// one that sees no drain fails at its deadline through the sweep, which
// voids the earlier proof; a marker seen after the window closed proves
// nothing; a failure before the window (codex queue refused) is recorded
// too. A repair to another fingerprint voids a proof.
func TestQueueValidation_Lifecycle(t *testing.T) {
	d := newDesk(t)
	d.fail(startQueue("T", marker1, time.Minute), errs.ENOTCONF)
	d.exec(desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, Fingerprint: fpA})
	d.fail(startQueue("T", marker1, time.Minute), errs.BindingOrCapabilityInvalid)
	d.exec(desktop.RepairBinding{ThreadID: "T"}) // no caller automation: the queue's only
	d.exec(desktop.RepairBinding{ThreadID: "U"})
	d.exec(desktop.UnbindBinding{ThreadID: "U"})
	d.fail(startQueue("U", marker1, time.Minute), errs.BindingOrCapabilityInvalid)
	d.fail(startQueue("T", marker1, 0), errs.EINVAL)
	d.fail(startQueue("T", marker1, desktop.MaxQueueValidationWindow+time.Second), errs.EINVAL)
	d.fail(startQueue("T", "short", time.Minute), errs.EINVAL)

	v, res := deskAnswer[events.InstallationQueueValidationStarted](d, startQueue("T", marker1, 2*time.Minute))
	if res.Outcome != command.OutcomeRequested || !v.Deadline.Equal(d.clock.Now().Add(2*time.Minute)) {
		t.Fatalf("start: %s %+v", res.Outcome, v)
	}
	if inst := d.installation(); inst.QueueValidation == nil || inst.QueueWritebackValidated() || inst.WritebackTransport() != "" {
		t.Fatalf("an open validation validates nothing: %+v", inst)
	}
	d.fail(desktop.ValidateQueueWriteback{Marker: marker2, Fingerprint: fpA}, errs.ESTALE)
	d.clock.Advance(time.Minute)
	p, res := deskAnswer[events.InstallationQueueWritebackValidated](d, desktop.ValidateQueueWriteback{Marker: marker1, Fingerprint: fpA})
	if res.Outcome != command.OutcomeValidated || p.ThreadID != "T" || p.QueuedItemID != "item-0123" || p.CodexHome != "/codex" {
		t.Fatalf("validate: %s %+v", res.Outcome, p)
	}
	inst := d.installation()
	if !inst.QueueWritebackValidated() || inst.WritebackTransport() != desktop.WritebackQueue || inst.WritebackValidated() || inst.QueueValidation != nil {
		t.Fatalf("after the proof: transport %q, heartbeat writeback %t, open %+v", inst.WritebackTransport(), inst.WritebackValidated(), inst.QueueValidation)
	}
	head := d.e.Head()
	if _, res := deskAnswer[events.InstallationQueueWritebackValidated](d, desktop.ValidateQueueWriteback{Marker: marker1, Fingerprint: fpA}); res.Outcome != command.OutcomeAlreadyValidated || d.e.Head() != head {
		t.Fatalf("the same marker again: %s, appended %t", res.Outcome, d.e.Head() != head)
	}

	// Not drained: the sweep fails it at its deadline, not before.
	deskAnswer[events.InstallationQueueValidationStarted](d, startQueue("T", marker2, time.Minute))
	if !d.installation().QueueWritebackValidated() {
		t.Fatal("an open re-validation voided the proof before its outcome")
	}
	d.clock.Advance(59 * time.Second)
	if n := sweepEmits(d); n != 0 {
		t.Fatalf("the sweep acted %d times before the deadline", n)
	}
	d.clock.Advance(time.Second)
	d.fail(desktop.ValidateQueueWriteback{Marker: marker2, Fingerprint: fpA}, errs.ESTALE)
	if n := sweepEmits(d); n != 1 {
		t.Fatalf("the sweep at the deadline appended %d events, want the failure", n)
	}
	inst = d.installation()
	if f := inst.QueueFailure; f == nil || f.Reason != events.QueueNotDrained || f.Marker != marker2 || !strings.Contains(f.Detail, "T") {
		t.Fatalf("failure: %+v", inst.QueueFailure)
	}
	if inst.QueueWritebackValidated() || inst.QueueValidation != nil || inst.WritebackTransport() != "" {
		t.Fatalf("a failed validation left the transport %q (open %+v)", inst.WritebackTransport(), inst.QueueValidation)
	}
	if n := sweepEmits(d); n != 0 {
		t.Fatalf("the sweep failed it again: %d", n)
	}

	// A failure before the window: recorded with its reason; only the
	// reasons codex queue gives.
	d.fail(desktop.FailQueueValidation{ThreadID: "T", CodexHome: "/codex", Reason: events.QueueNotDrained}, errs.EINVAL)
	d.fail(desktop.FailQueueValidation{ThreadID: "U", CodexHome: "/codex", Reason: events.QueueRefused}, errs.BindingOrCapabilityInvalid)
	deskAnswer[events.InstallationQueueValidationStarted](d, startQueue("T", marker1, time.Minute))
	deskAnswer[events.InstallationQueueWritebackValidated](d, desktop.ValidateQueueWriteback{Marker: marker1, Fingerprint: fpA})
	d.exec(desktop.FailQueueValidation{ThreadID: "T", CodexHome: "/codex", Reason: events.QueueRefused, Detail: "codex queue refused: exit status 1"})
	if inst := d.installation(); inst.QueueWritebackValidated() || inst.QueueFailure.Reason != events.QueueRefused {
		t.Fatalf("a refused validation: %+v", inst.QueueFailure)
	}

	// A proof holds for the fingerprint it was given for.
	deskAnswer[events.InstallationQueueValidationStarted](d, startQueue("T", marker2, time.Minute))
	deskAnswer[events.InstallationQueueWritebackValidated](d, desktop.ValidateQueueWriteback{Marker: marker2, Fingerprint: fpA})
	d.exec(desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, Fingerprint: fpB})
	if inst := d.installation(); inst.QueueWritebackValidated() || inst.WritebackTransport() != "" {
		t.Fatal("a repair to another cbth kept the queue proof")
	}
}

// sweepEmits runs the overdue sweep at the desk's now and counts what it
// appended.
func sweepEmits(d *desk) int {
	d.t.Helper()
	head := d.e.Head()
	d.exec(command.Sweep{Config: cfg})
	return int(d.e.Head() - head)
}

// Bindings without a caller automation serve the queue transport only:
// any number of threads may have one, and the heartbeat gate refuses
// them; with the queue in use, the heartbeat gate refuses every head.
func TestQueueBindingsAndTheHeartbeatGate(t *testing.T) {
	d := newDesk(t)
	d.validated()
	d.exec(desktop.RepairBinding{ThreadID: "T"})
	d.exec(desktop.RepairBinding{ThreadID: "U"})
	d.exec(desktop.RepairBinding{ThreadID: "W", AutomationID: "A"})
	if b := d.binding("U"); b == nil || b.State != fsm.BindingBound || b.CallerAutomationID != "" {
		t.Fatalf("a second binding without automation: %+v", b)
	}
	if r := d.gate(d.ready("T", lowRisk), fpA); r.OK || !strings.Contains(r.Reason, "no caller automation") {
		t.Fatalf("heartbeat gate on a binding without automation: %+v", r)
	}
	if r := d.gate(d.ready("W", lowRisk), fpA); !r.OK {
		t.Fatalf("heartbeat gate on a bound thread: %s", r.Reason)
	}
	// The operator's writeback capability taken back, the queue
	// validated: the queue is the transport, and no heartbeat gets a head.
	d.exec(desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, ReadCap: events.CapValidated, Fingerprint: fpA})
	d.exec(desktop.RepairBinding{ThreadID: "W", AutomationID: "A"})
	deskAnswer[events.InstallationQueueValidationStarted](d, startQueue("W", marker1, time.Minute))
	deskAnswer[events.InstallationQueueWritebackValidated](d, desktop.ValidateQueueWriteback{Marker: marker1, Fingerprint: fpA})
	if r := d.gate(d.headOf("W"), fpA); r.OK || !strings.Contains(r.Reason, "in use is queue") {
		t.Fatalf("heartbeat gate with the queue in use: %+v", r)
	}
}

func (d *desk) headOf(thread string) *aggregate.Batch {
	d.t.Helper()
	var b *aggregate.Batch
	d.read(func(s engine.Snapshot) {
		el, err := cfg.Eligible(s, d.clock.Now(), thread)
		if err != nil {
			d.t.Fatal(err)
		}
		b = el.Batch
	})
	if b == nil {
		d.t.Fatalf("thread %s has no head", thread)
	}
	return b
}

// The queue gate, rule by rule: each state that must hold the head back
// (or park it) does, with its reason; all of them right lets it through.
func TestQueueGateOf(t *testing.T) {
	caps := events.Capabilities{ReadTransport: desktop.TransportDirect, ReadTransportGeneration: 2, ValidationFingerprint: fpA}
	inst := func() *aggregate.Installation {
		return &aggregate.Installation{Capabilities: caps, QueueWriteback: &aggregate.QueueWriteback{
			InstallationQueueWritebackValidated: events.InstallationQueueWritebackValidated{ThreadID: "T", Fingerprint: fpA, CodexHome: "/codex"}}}
	}
	bound := func() *aggregate.Binding {
		b := &aggregate.Binding{SourceThreadID: "T", Mirror: caps}
		b.State = fsm.BindingBound
		return b
	}
	batch := func() *aggregate.Batch { return &aggregate.Batch{SourceThreadID: "T", Policy: lowRisk} }
	for _, tc := range []struct {
		name   string
		change func(b *aggregate.Batch, bd **aggregate.Binding, in **aggregate.Installation, observed, home, trust *string)
		park   bool
		reason string // "" lets it through
	}{
		{name: "all right"},
		{name: "artifact read", change: func(b *aggregate.Batch, _ **aggregate.Binding, _ **aggregate.Installation, _, _, _ *string) {
			b.RequiresArtifactRead = true
		}, park: true, reason: "requires_artifact_read"},
		{name: "not low-risk", change: func(b *aggregate.Batch, _ **aggregate.Binding, _ **aggregate.Installation, _, _, _ *string) {
			b.Policy.RequiresNetwork = true
		}, park: true, reason: "not read-only and low-risk"},
		{name: "no installation", change: func(_ *aggregate.Batch, _ **aggregate.Binding, in **aggregate.Installation, _, _, _ *string) {
			*in = nil
		},
			reason: "no Desktop installation state"},
		{name: "never bound", change: func(_ *aggregate.Batch, bd **aggregate.Binding, _ **aggregate.Installation, _, _, _ *string) {
			*bd = nil
		},
			reason: "thread not bound"},
		{name: "unbound", change: func(_ *aggregate.Batch, bd **aggregate.Binding, _ **aggregate.Installation, _, _, _ *string) {
			(*bd).State = fsm.BindingUnbound
		}, reason: "thread not bound"},
		{name: "degraded", change: func(_ *aggregate.Batch, bd **aggregate.Binding, _ **aggregate.Installation, _, _, _ *string) {
			(*bd).State, (*bd).DegradedReason = fsm.BindingDegraded, "why"
		}, reason: "binding degraded: why"},
		{name: "old mirror", change: func(_ *aggregate.Batch, bd **aggregate.Binding, _ **aggregate.Installation, _, _, _ *string) {
			(*bd).Mirror.ReadTransportGeneration = 1
		}, reason: "mirror does not match"},
		{name: "never validated", change: func(_ *aggregate.Batch, _ **aggregate.Binding, in **aggregate.Installation, _, _, _ *string) {
			(*in).QueueWriteback = nil
		}, reason: "not validated"},
		{name: "validated for another cbth", change: func(_ *aggregate.Batch, _ **aggregate.Binding, in **aggregate.Installation, _, _, _ *string) {
			(*in).QueueWriteback.Fingerprint = fpB
		}, reason: "not validated"},
		{name: "a heartbeat transport in use", change: func(_ *aggregate.Batch, _ **aggregate.Binding, in **aggregate.Installation, _, _, _ *string) {
			(*in).WritebackCapability = events.CapValidated
		}, reason: "in use is direct"},
		{name: "this cbth's fingerprint differs", change: func(_ *aggregate.Batch, _ **aggregate.Binding, _ **aggregate.Installation, observed, _, _ *string) {
			*observed = fpB
		}, reason: "fingerprint differs"},
		{name: "another Codex home", change: func(_ *aggregate.Batch, _ **aggregate.Binding, _ **aggregate.Installation, _, home, _ *string) {
			*home = "/other"
		}, reason: "validated for the Codex home /codex"},
		{name: "a heartbeat armed, unquiesced", change: func(_ *aggregate.Batch, bd **aggregate.Binding, _ **aggregate.Installation, _, _, _ *string) {
			(*bd).ArmedGeneration = 3
		}, reason: "armed generation 3 not yet proven quiesced"},
		{name: "strict trust", change: func(_ *aggregate.Batch, _ **aggregate.Binding, _ **aggregate.Installation, _, _, trust *string) {
			*trust = events.TrustStrict
		}, reason: "cbth thread trust --thread-id T --own-permissions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, bd, in := batch(), bound(), inst()
			observed, home, trust := fpA, "/codex", events.TrustOwnPermissions
			if tc.change != nil {
				tc.change(b, &bd, &in, &observed, &home, &trust)
			}
			r := desktop.QueueGateOf(b, bd, in, observed, home, trust)
			if r.OK != (tc.reason == "") || r.Park != tc.park || !strings.Contains(r.Reason, tc.reason) {
				t.Fatalf("QueueGateOf = ok %t park %t %q; want reason %q park %t", r.OK, r.Park, r.Reason, tc.reason, tc.park)
			}
		})
	}
}
