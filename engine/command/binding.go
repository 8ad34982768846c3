package command

import (
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// What the delivery core reads of a thread's Desktop binding and of the
// installation, and what it does to them: a close steps the cursor of the
// bridge serving the thread (CursorScope), and the sweep degrades a
// binding whose deadlines passed (DegradeBinding). The Desktop product's
// deciders (engine/command/desktop) write the rest.

// InstallationID is the installation aggregate's one id.
const InstallationID = "desktop"

// Installation returns the Desktop installation state, nil before the
// first repair.
func Installation(v engine.Reader) (*aggregate.Installation, error) {
	return engine.Installation(v, InstallationID)
}

// BindingOf returns a thread's binding, nil if it never had one.
func BindingOf(v engine.Reader, thread string) (*aggregate.Binding, error) {
	refs := v.Lookup(index.BindingByThread, thread)
	if len(refs) == 0 {
		return nil, nil
	}
	if len(refs) > 1 {
		return nil, errs.New(errs.ECORRUPT, "thread %s has %d bindings", thread, len(refs))
	}
	return engine.Binding(v, refs[0].ID)
}

// BindingStream is the stream of binding id.
func BindingStream(id string) events.StreamID {
	return events.StreamID{Kind: events.KindBinding, ID: id}
}

// DesktopCursorScope is the fair-ready cursor of a bridge thread: the
// Desktop ready order is kept per bridge.
func DesktopCursorScope(bridge string) string { return TargetCursorScope(TargetDesktop) + "/" + bridge }

// TargetCursorScope is the fair-ready cursor of target t as a whole: the
// cursor aggregate's id is the target's name.
func TargetCursorScope(t Target) string { return string(t) }

// CursorScope is the fair-ready cursor a close (or a skip) of head b
// advances: its target's, or for a Desktop batch, that of the bridge
// serving its thread. Every close of a head steps a cursor, so the scope
// is the core's to know; it reads the thread's binding and the
// installation for it.
func CursorScope(v engine.Reader, b *aggregate.Batch) (string, error) {
	if b.TargetKind != TargetDesktop {
		return TargetCursorScope(b.TargetKind), nil
	}
	inst, err := Installation(v)
	if err != nil || inst == nil || inst.BridgeThreadID == "" {
		return TargetCursorScope(b.TargetKind), err
	}
	bd, err := BindingOf(v, b.SourceThreadID)
	if err != nil {
		return "", err
	}
	if bd != nil && bd.BridgeThreadID != "" {
		return DesktopCursorScope(bd.BridgeThreadID), nil
	}
	return DesktopCursorScope(inst.BridgeThreadID), nil
}

// AbandonLive returns the event that abandons the thread's live attempt,
// if it has one, and that attempt's id.
func AbandonLive(v engine.Reader, thread, reason string) ([]engine.Emit, string, error) {
	a, err := LiveAttempt(v, thread)
	if err != nil || a == nil {
		return nil, "", err
	}
	return []engine.Emit{{Stream: AttemptStream(a.ID), Payload: &events.AttemptAbandoned{Reason: reason}}}, a.ID, nil
}

// DegradeBinding returns the events that take bd out of automatic
// continuation and abandon its thread's live attempt. The sweep degrades
// a binding whose pause deadline passed, so this is the core's.
func DegradeBinding(v engine.Reader, bd *aggregate.Binding, reason string) ([]engine.Emit, error) {
	emits := []engine.Emit{{Stream: BindingStream(bd.ID), Payload: &events.BindingDegraded{Reason: reason}}}
	ab, _, err := AbandonLive(v, bd.SourceThreadID, "binding degraded: "+reason)
	return append(emits, ab...), err
}
