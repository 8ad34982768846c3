// Package desktop is the Codex Desktop delivery target, part 1: a pull
// target whose heads the scheduler only prepares, and the daemon-side
// publisher of the snapshots the Desktop bridge reads (package inbox is
// their format and the sandbox-safe reader). spec/desktop.md is the
// contract.
package desktop

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/cbth-dev/cbth/adapters/desktop/inbox"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
)

// Fingerprints holds what the daemon's own cbth observes, per transport.
type Fingerprints map[string]string

// ObserveFingerprints computes the running cbth's fingerprint for each
// read transport.
func ObserveFingerprints(version string) (Fingerprints, error) {
	fp := Fingerprints{}
	for _, t := range command.ReadTransports {
		f, err := inbox.Observe(version, t)
		if err != nil {
			return nil, err
		}
		fp[t] = f
	}
	return fp, nil
}

// Target is the Desktop pull target. Its gate is command.DesktopGate on
// the daemon's current state.
type Target struct {
	// Read runs fn on a consistent snapshot of the daemon's state.
	Read         func(fn func(engine.Snapshot) error) error
	Now          func() time.Time
	Fingerprints Fingerprints
}

// Spec implements target.Target.
func (t *Target) Spec() target.Spec {
	return target.Spec{Name: command.TargetDesktop, Kind: target.Pull, DeliveryMode: command.ModeDesktop}
}

// Gate implements target.Target.
func (t *Target) Gate(_ context.Context, h target.Head) target.Gate {
	var g target.Gate
	err := t.Read(func(s engine.Snapshot) error {
		st, err := s.State(events.KindBatch, h.BatchID)
		if err != nil {
			return err
		}
		b, ok := st.(*aggregate.Batch)
		if !ok {
			g.Reason = "no batch " + h.BatchID
			return nil
		}
		r, err := command.DesktopGate(s, t.Now(), b, t.observed(s))
		g.OK, g.Park, g.Reason, g.Retry = r.OK, r.Park, r.Reason, r.Wake
		return err
	})
	if err != nil {
		return target.Gate{Reason: "desktop gate: " + err.Error()}
	}
	return g
}

// observed is the daemon's fingerprint for the installation's transport.
func (t *Target) observed(r engine.Reader) string {
	inst, err := command.Installation(r)
	if err != nil || inst == nil {
		return ""
	}
	return t.Fingerprints[inst.ReadTransport]
}

// Content is one publication's substance: everything but its revision
// and times. Two publications with equal Content share a revision.
type Content struct {
	Bridge       string
	Ready        []inbox.ReadyEntry
	ArmPending   []inbox.ArmPendingEntry
	PauseDue     []inbox.PauseDueEntry
	Bindings     []inbox.BindingEntry
	Installation inbox.InstallationState
	// ValidUntil is the earliest time at which the passage of time alone
	// could change the content (a back-off ending, a pause window
	// opening); zero if none.
	ValidUntil time.Time `json:"-"`
}

// Build computes the content of a publication for the installation's
// bridge thread at now. ok is false when there is nothing to publish: no
// installation state, or no bridge thread selected yet. It reads only.
func Build(s engine.Snapshot, cfg command.DeliveryConfig, now time.Time, fps Fingerprints) (c Content, ok bool, err error) {
	inst, err := command.Installation(s)
	if err != nil || inst == nil || inst.BridgeThreadID == "" {
		return c, false, err
	}
	c.Bridge = inst.BridgeThreadID
	observed := fps[inst.ReadTransport]
	c.Installation = inbox.InstallationState{
		ReadTransport: inst.ReadTransport, ReadTransportGeneration: inst.ReadTransportGeneration,
		ReadTransportCapability: inst.ReadTransportCapability, ArtifactReadCapability: inst.ArtifactReadCapability,
		WritebackCapability: inst.WritebackCapability, ValidationFingerprint: inst.ValidationFingerprint,
		UpdatedByBootstrapOrRepair: inst.UpdatedBy, ObservedValidationFingerprint: observed,
		AutomaticContinuation: inst.ReadTransportCapability == command.CapValidated &&
			inst.WritebackCapability == command.CapValidated && observed == inst.ValidationFingerprint,
	}
	if !inst.ValidatedAt.IsZero() {
		at := inst.ValidatedAt
		c.Installation.ValidatedAt = &at
	}
	wake := func(t time.Time) {
		if !t.IsZero() && t.After(now) && (c.ValidUntil.IsZero() || t.Before(c.ValidUntil)) {
			c.ValidUntil = t
		}
	}
	bindings := map[string]*aggregate.Binding{}
	binding := func(thread string) (*aggregate.Binding, error) {
		if b, ok := bindings[thread]; ok {
			return b, nil
		}
		b, err := command.BindingOf(s, thread)
		if err == nil && b != nil && !command.ServesBridge(b, c.Bridge) {
			b = nil
		}
		bindings[thread] = b
		return b, err
	}

	threads, err := command.FairOrderScoped(s, command.TargetDesktop, command.DesktopCursorScope(c.Bridge))
	if err != nil {
		return c, false, err
	}
	for _, th := range threads {
		a, err := liveAttempt(s, th)
		if err != nil {
			return c, false, err
		}
		if a == nil || (a.Status != "prepared" && a.Status != "arm_pending") {
			continue
		}
		bd, err := binding(th)
		if err != nil {
			return c, false, err
		}
		if bd == nil {
			continue
		}
		if a.Status == "arm_pending" {
			c.ArmPending = append(c.ArmPending, inbox.ArmPendingEntry{SourceThreadID: th, BatchID: a.BatchID, AttemptID: a.ID,
				Generation: a.Generation, SnapshotRevision: a.SnapshotRevision, CallerAutomationID: bd.CallerAutomationID,
				BridgeRequestID: a.BridgeRequestID, ArmPendingSince: a.ArmPendingSince, ArmPendingDeadline: a.ArmPendingDeadline,
				BridgeArmLeaseDeadline: a.BridgeArmLeaseDeadline})
			continue
		}
		el, err := cfg.Eligible(s, now, th)
		if err != nil {
			return c, false, err
		}
		if !el.OK || el.Batch.ID != a.BatchID {
			wake(el.Wake)
			continue
		}
		g, err := command.DesktopGate(s, now, el.Batch, observed)
		if err != nil {
			return c, false, err
		}
		wake(g.Wake)
		if !g.OK {
			continue
		}
		c.Ready = append(c.Ready, inbox.ReadyEntry{SourceThreadID: th, BatchID: a.BatchID, AttemptID: a.ID,
			Generation: a.Generation, SnapshotRevision: a.SnapshotRevision, RequiresArtifactRead: el.Batch.RequiresArtifactRead})
	}

	for _, r := range s.Scan(index.BindingUnquiesced, "") {
		st, err := s.State(events.KindBinding, r.ID)
		if err != nil {
			return c, false, err
		}
		bd, ok := st.(*aggregate.Binding)
		if !ok || !bd.Unquiesced() || !command.ServesBridge(bd, c.Bridge) {
			continue
		}
		if now.Before(bd.PauseNotBefore) {
			wake(bd.PauseNotBefore)
			continue
		}
		wake(bd.PauseDeadline)
		bindings[bd.SourceThreadID] = bd
		c.PauseDue = append(c.PauseDue, inbox.PauseDueEntry{SourceThreadID: bd.SourceThreadID, BindingID: bd.ID,
			BindingState: bd.Status, CallerAutomationID: bd.CallerAutomationID, ArmedGeneration: bd.ArmedGeneration,
			PauseNotBefore: bd.PauseNotBefore, PauseDeadline: bd.PauseDeadline,
			Overdue: !bd.PauseDeadline.IsZero() && !now.Before(bd.PauseDeadline)})
	}
	// The bridge's reconciliation handles every binding past its pause
	// deadline first.
	slices.SortStableFunc(c.PauseDue, func(a, b inbox.PauseDueEntry) int {
		if a.Overdue != b.Overdue {
			if a.Overdue {
				return -1
			}
			return 1
		}
		return cmp.Or(a.PauseDeadline.Compare(b.PauseDeadline), cmp.Compare(a.SourceThreadID, b.SourceThreadID))
	})

	for th, bd := range bindings {
		if bd == nil {
			continue
		}
		e := inbox.BindingEntry{SourceThreadID: th, BindingID: bd.ID, BindingState: bd.Status,
			CallerAutomationID: bd.CallerAutomationID, BridgeThreadID: bd.BridgeThreadID,
			ReadTransport: bd.Mirror.ReadTransport, ReadTransportGeneration: bd.Mirror.ReadTransportGeneration,
			ValidationFingerprint: bd.Mirror.ValidationFingerprint, ArmedGeneration: bd.ArmedGeneration}
		if !bd.ArmedGenerationQuiesced.IsZero() {
			at := bd.ArmedGenerationQuiesced
			e.ArmedGenerationQuiescedAt = &at
		}
		c.Bindings = append(c.Bindings, e)
	}
	slices.SortFunc(c.Bindings, func(a, b inbox.BindingEntry) int { return cmp.Compare(a.SourceThreadID, b.SourceThreadID) })
	return c, true, nil
}

// liveAttempt returns the thread's non-terminal attempt, if any.
func liveAttempt(s engine.Reader, thread string) (*aggregate.Attempt, error) {
	refs := s.Lookup(index.ThreadLive, thread)
	if len(refs) == 0 {
		return nil, nil
	}
	st, err := s.State(events.KindAttempt, refs[0].ID)
	if a, ok := st.(*aggregate.Attempt); ok {
		return a, err
	}
	return nil, err
}
