package desktop_test

import (
	"context"
	"path/filepath"
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
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

// The Desktop commands on a real engine (spec/desktop.md names each test).

var cfg = enginetest.DeliveryConfig()

const fpA, fpB = "fp1-aaaa", "fp1-bbbb"

var lowRisk = events.DeliveryPolicy{ReadOnly: true}

type desk struct {
	t     *testing.T
	e     *engine.Engine
	clock *engine.ManualClock
}

func newDesk(t *testing.T) *desk {
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})
	return &desk{t: t, e: e, clock: clock}
}

// deskAnswer is exec for a command that answers with a V.
func deskAnswer[V any, C engine.Answerer[V]](d *desk, c C) (V, engine.Result) {
	d.t.Helper()
	return enginetest.Answer[V](d.t, d.e, engine.Meta{Actor: events.ActorOperator}, c)
}

func (d *desk) exec(c engine.Decider) engine.Result {
	d.t.Helper()
	res, err := d.e.Execute(context.Background(), engine.Meta{Actor: events.ActorOperator}, c)
	if err != nil {
		d.t.Fatalf("%T: %v", c, err)
	}
	return res
}

func (d *desk) fail(c engine.Decider, code errs.Code) {
	d.t.Helper()
	head := d.e.Head()
	if _, err := d.e.Execute(context.Background(), engine.Meta{Actor: events.ActorOperator}, c); errs.CodeOf(err) != code {
		d.t.Fatalf("%T: %v, want %s", c, err, code)
	}
	if d.e.Head() != head {
		d.t.Fatalf("%T failed but appended", c)
	}
}

func (d *desk) read(fn func(s engine.Snapshot)) {
	d.t.Helper()
	if err := d.e.Read(func(s engine.Snapshot) error { fn(s); return nil }); err != nil {
		d.t.Fatal(err)
	}
}

func (d *desk) installation() *aggregate.Installation {
	var inst *aggregate.Installation
	d.read(func(s engine.Snapshot) { inst, _ = command.Installation(s) })
	return inst
}

func (d *desk) binding(thread string) *aggregate.Binding {
	var b *aggregate.Binding
	d.read(func(s engine.Snapshot) { b, _ = command.BindingOf(s, thread) })
	return b
}

func (d *desk) validated() {
	d.exec(desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, ReadCap: events.CapValidated,
		WritebackCap: events.CapValidated, Fingerprint: fpA})
	d.exec(desktop.SelectBridge{BridgeThreadID: "B"})
}

// ready makes a thread's head batch with one completed low-risk job (or
// policy p) and prepares its attempt as the scheduler does.
func (d *desk) ready(thread string, p events.DeliveryPolicy) *aggregate.Batch {
	d.t.Helper()
	id, _ := deskAnswer[string](d, command.SubmitJob{Target: command.TargetDesktop, ThreadID: thread, TaskKind: "ci", Summary: "s", Policy: p})
	d.exec(command.CompleteJob{Config: cfg, JobID: id, Summary: "done"})
	d.clock.Advance(cfg.MaxWaitWindow)
	var b *aggregate.Batch
	d.read(func(s engine.Snapshot) {
		el, err := cfg.Eligible(s, d.clock.Now(), thread)
		if err != nil {
			d.t.Fatal(err)
		}
		b = el.Batch
	})
	return b
}

func (d *desk) gate(b *aggregate.Batch, fp string) aggregate.DesktopReadiness {
	var r aggregate.DesktopReadiness
	d.read(func(s engine.Snapshot) {
		cur, _ := s.State(events.KindBatch, b.ID)
		var err error
		if r, err = desktop.DesktopGate(s, d.clock.Now(), cur.(*aggregate.Batch), fp); err != nil {
			d.t.Fatal(err)
		}
	})
	return r
}

func (d *desk) live(thread string) *aggregate.Attempt {
	var a *aggregate.Attempt
	d.read(func(s engine.Snapshot) {
		el, _ := cfg.Eligible(s, d.clock.Now(), thread)
		a = el.Attempt
	})
	return a
}

func TestRepairInstallation_SameParametersAppendNothing(t *testing.T) {
	d := newDesk(t)
	rep := desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, ReadCap: events.CapValidated, Fingerprint: fpA}
	if res := d.exec(rep); res.Outcome != "repaired" {
		t.Fatalf("first repair: %s", res.Outcome)
	}
	first := d.installation()
	d.clock.Advance(time.Hour)
	head := d.e.Head()
	if res := d.exec(rep); res.Outcome != "unchanged" || len(res.Events) != 0 || d.e.Head() != head {
		t.Fatalf("repeated repair: outcome %s, %d events, head %d -> %d", res.Outcome, len(res.Events), head, d.e.Head())
	}
	if again := d.installation(); again.ReadTransportGeneration != 1 || !again.ValidatedAt.Equal(first.ValidatedAt) {
		t.Fatalf("repeated repair moved generation %d or validated_at %s", again.ReadTransportGeneration, again.ValidatedAt)
	}
}

func TestRepairInstallation_TransportChangeResetsCapabilitiesAndBumps(t *testing.T) {
	d := newDesk(t)
	d.exec(desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, ReadCap: events.CapValidated,
		ArtifactCap: events.CapUnavailable, WritebackCap: events.CapValidated, Fingerprint: fpA})
	if i := d.installation(); i.ValidatedAt.IsZero() || i.ReadTransportGeneration != 1 || i.UpdatedBy != desktop.UpdatedByRepair {
		t.Fatalf("validated repair: %+v", i)
	}
	d.exec(desktop.RepairInstallation{ReadTransport: desktop.TransportHelper, Fingerprint: fpA})
	i := d.installation()
	if i.ReadTransport != desktop.TransportHelper || i.ReadTransportGeneration != 2 || !i.ValidatedAt.IsZero() ||
		i.ReadTransportCapability != events.CapUnknown || i.ArtifactReadCapability != events.CapUnknown || i.WritebackCapability != events.CapUnknown {
		t.Fatalf("transport change without capabilities: %+v", i)
	}
	// Capabilities given with the change are written as given.
	d.exec(desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, ReadCap: events.CapValidated, Fingerprint: fpA})
	if i := d.installation(); i.ReadTransportGeneration != 3 || i.ReadTransportCapability != events.CapValidated || i.WritebackCapability != events.CapUnknown {
		t.Fatalf("transport change with a capability: %+v", i)
	}
	d.fail(desktop.RepairInstallation{ReadTransport: "smoke_signals", Fingerprint: fpA}, errs.EINVAL)
	d.fail(desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, ReadCap: "maybe", Fingerprint: fpA}, errs.EINVAL)
}

func TestRepairInstallation_DegradesMismatchedBindings(t *testing.T) {
	d := newDesk(t)
	d.validated()
	d.exec(desktop.RepairBinding{ThreadID: "S", AutomationID: "A"})
	b := d.ready("S", lowRisk)
	d.exec(command.PrepareAttempt{Config: cfg, ThreadID: "S", DeliveryMode: command.ModeDesktop})
	if a := d.live("S"); a == nil || a.State != fsm.AttemptPrepared {
		t.Fatalf("attempt: %+v", a)
	}
	if g := d.gate(b, fpA); !g.OK {
		t.Fatalf("gate before the repair: %s", g.Reason)
	}
	rep, _ := deskAnswer[desktop.InstallationRepair](d, desktop.RepairInstallation{ReadTransport: desktop.TransportHelper, ReadCap: events.CapValidated,
		WritebackCap: events.CapValidated, Fingerprint: fpA})
	if got := rep.Degraded; len(got) != 1 || got[0] != "S" {
		t.Fatalf("degraded %v", got)
	}
	if bd := d.binding("S"); bd.State != fsm.BindingDegraded || !strings.Contains(bd.DegradedReason, "generation 2") {
		t.Fatalf("binding after the repair: %+v", bd)
	}
	if a := d.live("S"); a != nil {
		t.Fatalf("the live attempt survived the degrade: %+v", a)
	}
	if g := d.gate(b, fpA); g.OK || !strings.Contains(g.Reason, "degraded") {
		t.Fatalf("gate of a degraded binding: %+v", g)
	}
	// A binding repair mirrors the new state and makes it eligible again.
	d.exec(desktop.RepairBinding{ThreadID: "S", AutomationID: "A"})
	if bd := d.binding("S"); bd.State != fsm.BindingBound || bd.Mirror.ReadTransportGeneration != 2 || !d.gate(b, fpA).OK {
		t.Fatalf("repaired binding: %+v gate %+v", bd, d.gate(b, fpA))
	}
}

func TestRepairBinding_RulesAndEchoes(t *testing.T) {
	d := newDesk(t)
	d.fail(desktop.RepairBinding{ThreadID: "S", AutomationID: "A"}, errs.ESTATE) // no installation yet
	d.validated()
	v, res := deskAnswer[desktop.BindingRepair](d, desktop.RepairBinding{ThreadID: "S", AutomationID: "A"})
	if res.Outcome != "bound" || v.ReplacedAutomation || !v.OldQuiesced || v.ForcedFreshAttempt {
		t.Fatalf("first bind: %s %+v", res.Outcome, v)
	}
	head := d.e.Head()
	if res := d.exec(desktop.RepairBinding{ThreadID: "S", AutomationID: "A"}); res.Outcome != "unchanged" || d.e.Head() != head {
		t.Fatalf("repeated bind: %s", res.Outcome)
	}
	// One automation serves one thread.
	d.fail(desktop.RepairBinding{ThreadID: "T", AutomationID: "A"}, errs.EEXIST)

	// Replacing the automation supersedes the live attempt: the next one
	// is a fresh generation, and the old automation's late wake is stale.
	d.ready("S", lowRisk)
	d.exec(command.PrepareAttempt{Config: cfg, ThreadID: "S", DeliveryMode: command.ModeDesktop})
	old := d.live("S")
	v, _ = deskAnswer[desktop.BindingRepair](d, desktop.RepairBinding{ThreadID: "S", AutomationID: "A2"})
	if !v.ReplacedAutomation || v.PreviousAutomationID != "A" || !v.OldQuiesced || !v.ForcedFreshAttempt || v.SupersededAttemptID != old.ID {
		t.Fatalf("replace: %+v", v)
	}
	if a := d.live("S"); a != nil {
		t.Fatalf("attempt left live after the replace: %+v", a)
	}
	d.exec(command.PrepareAttempt{Config: cfg, ThreadID: "S", DeliveryMode: command.ModeDesktop})
	if a := d.live("S"); a == nil || a.Generation != old.Generation+1 {
		t.Fatalf("fresh attempt: %+v after generation %d", a, old.Generation)
	}
	// The freed automation may serve another thread now.
	d.exec(desktop.RepairBinding{ThreadID: "T", AutomationID: "A"})
}

// A binding armed for a generation that is not proven quiesced: a repair
// reports it and forces a fresh attempt even when the automation stays;
// the gate holds fresh arms until the generation is quiesced.
func TestRepairBinding_UnquiescedForcesFreshAttempt(t *testing.T) {
	d := newDesk(t)
	d.validated()
	d.exec(desktop.RepairBinding{ThreadID: "S", AutomationID: "A"})
	b := d.ready("S", lowRisk)
	bd := d.binding("S")
	now := d.clock.Now()
	// What part 2's note-arm records on the binding.
	if _, err := d.e.Append(context.Background(), engine.Meta{Actor: events.ActorBridge}, events.StreamID{Kind: events.KindBinding, ID: bd.ID},
		bd.Version, &events.BindingArmed{Generation: 1, PauseNotBefore: now.Add(90 * time.Second), PauseDeadline: now.Add(180 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if g := d.gate(b, fpA); g.OK || !strings.Contains(g.Reason, "not yet proven quiesced") {
		t.Fatalf("gate with an unquiesced generation: %+v", g)
	}
	d.exec(command.PrepareAttempt{Config: cfg, ThreadID: "S", DeliveryMode: command.ModeDesktop})
	old := d.live("S")
	if v, _ := deskAnswer[desktop.BindingRepair](d, desktop.RepairBinding{ThreadID: "S", AutomationID: "A", BridgeThreadID: "B"}); v.ReplacedAutomation || v.OldQuiesced || !v.ForcedFreshAttempt || v.SupersededAttemptID != old.ID {
		t.Fatalf("repair of an unquiesced binding: %+v", v)
	}
	d.clock.Advance(200 * time.Second)
	if g := d.gate(b, fpA); g.OK {
		t.Fatal("a binding past its pause deadline is eligible")
	}
}

func TestDesktopGate(t *testing.T) {
	d := newDesk(t)
	b := d.ready("S", lowRisk)
	reason := func(want string) {
		t.Helper()
		if g := d.gate(b, fpA); g.OK || g.Park || !strings.Contains(g.Reason, want) {
			t.Fatalf("gate %+v, want a hold with %q", g, want)
		}
	}
	reason("no Desktop installation state")
	d.exec(desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, Fingerprint: fpA})
	reason("not bound")
	d.exec(desktop.RepairBinding{ThreadID: "S", AutomationID: "A", BridgeThreadID: "B2"})
	reason("no bridge thread")
	d.exec(desktop.SelectBridge{BridgeThreadID: "B"})
	reason("pinned to bridge thread B2")
	d.exec(desktop.RepairBinding{ThreadID: "S", AutomationID: "A"})
	reason("read_transport_capability is unknown")
	d.exec(desktop.RepairInstallation{ReadTransport: desktop.TransportDirect, ReadCap: events.CapValidated, Fingerprint: fpA})
	reason("degraded") // the repair bumped the generation
	d.exec(desktop.RepairBinding{ThreadID: "S", AutomationID: "A"})
	reason("writeback_capability is unknown")
	d.validated()
	d.exec(desktop.RepairBinding{ThreadID: "S", AutomationID: "A"})
	if g := d.gate(b, fpA); !g.OK {
		t.Fatalf("everything in order: %+v", g)
	}
	if g := d.gate(b, fpB); g.OK || !strings.Contains(g.Reason, "fingerprint") {
		t.Fatalf("another fingerprint observed: %+v", g)
	}
	d.exec(desktop.UnbindBinding{ThreadID: "S"})
	reason("not bound")

	// Batches Desktop v1 never continues automatically are parked.
	for _, c := range []struct {
		thread string
		p      events.DeliveryPolicy
	}{{"net", events.DeliveryPolicy{ReadOnly: true, RequiresNetwork: true}}, {"write", events.FailClosedPolicy}} {
		b := d.ready(c.thread, c.p)
		if g := d.gate(b, fpA); !g.Park || g.OK {
			t.Fatalf("%s: gate %+v, want park", c.thread, g)
		}
		if res := d.exec(command.ParkHead{ThreadID: c.thread, BatchID: b.ID, Reason: "not low-risk"}); res.Outcome != "parked" {
			t.Fatalf("park: %s", res.Outcome)
		}
		if res := d.exec(command.ParkHead{ThreadID: c.thread, BatchID: b.ID, Reason: "again"}); res.Outcome != "unchanged" {
			t.Fatalf("second park: %s", res.Outcome)
		}
	}
	art := d.ready("art", lowRisk)
	art.RequiresArtifactRead = true
	var g aggregate.DesktopReadiness
	d.read(func(s engine.Snapshot) { g, _ = desktop.DesktopGate(s, d.clock.Now(), art, fpA) })
	if !g.Park || !strings.Contains(g.Reason, "requires_artifact_read") {
		t.Fatalf("a batch that needs an artifact read: %+v", g)
	}
}

func TestUnbind(t *testing.T) {
	d := newDesk(t)
	d.validated()
	d.fail(desktop.UnbindBinding{ThreadID: "S"}, errs.ENOENT)
	d.exec(desktop.RepairBinding{ThreadID: "S", AutomationID: "A"})
	d.ready("S", lowRisk)
	d.exec(command.PrepareAttempt{Config: cfg, ThreadID: "S", DeliveryMode: command.ModeDesktop})
	if res := d.exec(desktop.UnbindBinding{ThreadID: "S", DeleteAutomation: true}); res.Outcome != "unbound" {
		t.Fatalf("unbind: %s", res.Outcome)
	}
	if bd := d.binding("S"); bd.State != fsm.BindingUnbound || !bd.AutomationDeletedOnUnbind || d.live("S") != nil {
		t.Fatalf("after unbind: %+v attempt %+v", bd, d.live("S"))
	}
	if res := d.exec(desktop.UnbindBinding{ThreadID: "S"}); res.Outcome != "already_unbound" || len(res.Events) != 0 {
		t.Fatalf("second unbind: %s", res.Outcome)
	}
}

// The Desktop ready order is kept per bridge: a skip or a close of a
// Desktop head advances its bridge's cursor, not the target's.
func TestDesktopCursorIsPerBridge(t *testing.T) {
	d := newDesk(t)
	d.validated()
	for _, th := range []string{"S1", "S2", "S3"} {
		d.exec(desktop.RepairBinding{ThreadID: th, AutomationID: "A-" + th})
		d.ready(th, lowRisk)
	}
	order := func() string {
		var out []string
		d.read(func(s engine.Snapshot) {
			out, _ = command.FairOrderScoped(s, command.TargetDesktop, command.DesktopCursorScope("B"))
		})
		return strings.Join(out, ",")
	}
	if got := order(); got != "S1,S2,S3" {
		t.Fatalf("order %s", got)
	}
	d.exec(command.SkipHead{ThreadID: "S1"})
	if got := order(); got != "S2,S3,S1" {
		t.Fatalf("after skipping S1: %s", got)
	}
	d.exec(command.CloseHead{Config: cfg, ThreadID: "S2", Reason: command.CloseOperatorUnconfirmed})
	if got := order(); got != "S3,S1" {
		t.Fatalf("after closing S2: %s", got)
	}
	var target []string
	d.read(func(s engine.Snapshot) { target, _ = command.FairOrder(s, command.TargetDesktop) })
	if strings.Join(target, ",") != "S1,S3" {
		t.Fatalf("the target-wide cursor moved: %v", target)
	}
	if res := d.exec(command.SkipHead{ThreadID: "nobody"}); res.Outcome != "no_head" {
		t.Fatalf("skip without a head: %s", res.Outcome)
	}
}
