package codex

import (
	"fmt"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// ModeCodexDaemon is the mode of a session bound through the user's
// Codex daemon (BindDaemonSession).
const ModeCodexDaemon = fsm.SessionModeCodexDaemon

// Outcomes of BindDaemonSession besides AttachSession's.
const (
	// SessionReboundOutcome: the session moved onto the daemon's running
	// instance, at the next epoch.
	SessionReboundOutcome engine.Outcome = "rebound"
	// SessionObservedOutcome: the session was bound to it already; the
	// reading is recorded.
	SessionObservedOutcome engine.Outcome = "observed"
)

// BindDaemonSession binds a thread's managed session to the running
// instance of the user's Codex daemon, with a reading of the thread taken
// on it: the session the codex_daemon transport delivers through. There is
// no foreground, so the session is detached, and the seed's rules for
// detached delivery gate it. Per the thread's one non-retired session:
//
//   - none: created detached at epoch 1 (mode codex_daemon, every
//     dimension auto, pinned by this reading);
//   - detached on another instance (the shared app-server's, or an
//     earlier daemon's): the epoch advances onto this instance;
//   - already on this instance: the reading is recorded;
//   - stale (its thread was proven out of reach where it was bound):
//     retired and replaced by a new one;
//   - live (a `cbth cli run` foreground is attached; the shared
//     app-server delivers): refused EBUSY;
//   - parked, or any manual batch of the thread unresolved: refused
//     session_pending_manual_resolution (a detached session parks);
//   - a delivery in flight on its epoch (sent and unanswered, or an
//     accepted turn observed): refused EBUSY, since moving the epoch would
//     lose the stream that delivery waits on.
type BindDaemonSession struct {
	engine.Answers[AttachResult]

	ThreadID     string
	Instance     string
	Reading      Reading
	ThreadSource string
}

// Decide implements engine.Decider.
func (c BindDaemonSession) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := command.CheckID("thread id", c.ThreadID); err != nil {
		return engine.Decision{}, err
	}
	if err := runningInstance(v, TransportCodexDaemon, c.Instance); err != nil {
		return engine.Decision{}, err
	}
	s, err := SessionOf(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	manual, err := manualBatch(v, c.ThreadID)
	if err != nil {
		return engine.Decision{}, err
	}
	auto := events.SessionProfile{Approval: ProfileAuto, Network: ProfileAuto, WriteAccess: ProfileAuto}
	switch {
	case s == nil:
		return c.create(v, auto, "", nil)
	case s.State == fsm.SessionLive:
		return c.refuse(nil, s, errs.EBUSY, "session %s of thread %s has a `cbth cli run` foreground attached; the shared app-server delivers to it", s.ID, c.ThreadID)
	case manual != "" || s.State == fsm.SessionParked:
		var emits []engine.Emit
		if manual != "" && s.State != fsm.SessionParked {
			emits = append(emits, engine.Emit{Stream: sessionStream(s.ID), Payload: &events.SessionParked{BatchID: manual}})
		}
		return c.refuse(emits, s, errs.SessionPendingManualResolution,
			"thread %s has a batch waiting for manual resolution; close it (`cbth batch close-head`) before it is delivered again", c.ThreadID)
	}
	if a, err := command.LiveAttempt(v, c.ThreadID); err != nil {
		return engine.Decision{}, err
	} else if a != nil && a.ManagedSessionID == s.ID && a.SessionEpoch == s.Epoch && (a.State == fsm.AttemptAcceptPending || a.Tracking()) {
		return c.refuse(nil, s, errs.EBUSY, "attempt %s of thread %s is %s on epoch %d of session %s; the session moves when it is resolved", a.ID, c.ThreadID, a.State, s.Epoch, s.ID)
	}
	if s.State == fsm.SessionStale {
		emits := []engine.Emit{{Stream: sessionStream(s.ID), Payload: &events.SessionRetired{
			Reason: "replaced: its thread is reached through the Codex daemon (was stale: " + s.StaleReason + ")"}}}
		return c.create(v, auto, s.ID, emits)
	}
	st := *s
	var emits []engine.Emit
	out := SessionObservedOutcome
	if s.AppServerInstance != c.Instance {
		st.Epoch++
		st.AppServerInstance = c.Instance
		st.Current = events.Permissions{}
		emits = append(emits, engine.Emit{Stream: sessionStream(s.ID), Payload: &events.SessionEpochAdvanced{
			Epoch: st.Epoch, Reason: "bound through the Codex daemon: instance " + c.Instance, AppServerInstance: c.Instance}})
		out = SessionReboundOutcome
	}
	more, obs := observe(&st, c.Reading)
	emits = append(emits, more...)
	return c.Answer(engine.Decision{Outcome: out, Emits: emits}, AttachResult{SessionID: s.ID, Obs: &obs}), nil
}

func (c BindDaemonSession) refuse(emits []engine.Emit, s *aggregate.Session, code errs.Code, format string, args ...any) (engine.Decision, error) {
	res := AttachResult{SessionID: s.ID, Refusal: &errs.Error{Code: code, Message: fmt.Sprintf(format, args...)}}
	return c.Answer(engine.Decision{Outcome: SessionRefused, Emits: emits}, res), nil
}

func (c BindDaemonSession) create(v engine.View, prof events.SessionProfile, replaces string, emits []engine.Emit) (engine.Decision, error) {
	id := v.NewID()
	created := &events.SessionCreated{BoundThreadID: c.ThreadID, Mode: ModeCodexDaemon, Profile: prof, Startup: startupOf(prof),
		AppServerInstance: c.Instance, Replaces: replaces, ThreadSource: c.ThreadSource}
	emits = append(emits, engine.Emit{Stream: sessionStream(id), Payload: created})
	st := &aggregate.Session{BoundThreadID: c.ThreadID, Profile: prof, Startup: created.Startup, Epoch: 1, AppServerInstance: c.Instance}
	st.ID = id
	more, obs := observe(st, c.Reading)
	emits = append(emits, more...)
	out := SessionCreatedOutcome
	if replaces != "" {
		out = SessionReplacedOutcome
	}
	return c.Answer(engine.Decision{Outcome: out, Emits: emits}, AttachResult{SessionID: id, Retired: replaces, Obs: &obs}), nil
}

// DaemonBinding is a binding the CLI target's daemon transport needs
// before it can deliver, handed forward with a head that does not go yet:
// the scheduler records it (Record) and asks again.
type DaemonBinding struct{ BindDaemonSession }

// Barrier implements command.BarrierGate: nothing starts before the
// binding is recorded.
func (b *DaemonBinding) Barrier(engine.Reader) ([]engine.Emit, string, error) {
	return nil, "the thread's session is not bound to the Codex daemon yet", nil
}

// Record implements command.BarrierGate.
func (b *DaemonBinding) Record() engine.Decider { return b.BindDaemonSession }
