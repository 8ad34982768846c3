package codex_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

// sessions drives the session commands on a real engine with a manual
// clock.
type sessions struct {
	t *testing.T
	e *engine.Engine
}

func newSessions(t *testing.T) *sessions {
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})
	return &sessions{t: t, e: e}
}

// sessAnswer is exec for a command that answers with a V.
func sessAnswer[V any, C engine.Answerer[V]](s *sessions, c C) (V, engine.Result) {
	s.t.Helper()
	return enginetest.Answer[V](s.t, s.e, engine.Meta{Actor: events.ActorAdapter}, c)
}

func (s *sessions) exec(d engine.Decider) engine.Result {
	s.t.Helper()
	res, err := s.e.Execute(context.Background(), engine.Meta{Actor: events.ActorAdapter}, d)
	if err != nil {
		s.t.Fatalf("%T: %v", d, err)
	}
	return res
}

func (s *sessions) started(nonce string) engine.Result {
	s.t.Helper()
	return s.exec(codex.AppServerStarted{Started: events.AppServerStarted{PID: 1, Nonce: nonce, ProbePassed: true}})
}

// deliver submits and completes a job on thread and starts its delivery
// on the session's epoch 1: the attempt is accept_pending.
func (s *sessions) deliver(thread, session string) command.Delivery {
	s.t.Helper()
	id, _ := sessAnswer[string](s, command.SubmitJob{Target: "debug", ThreadID: thread, TaskKind: "k", Summary: "s", Policy: events.FailClosedPolicy})
	s.exec(command.CompleteJob{Config: immediate, JobID: id, Summary: "done"})
	del, res := sessAnswer[command.Delivery](s, command.StartDelivery{Config: immediate, ThreadID: thread, Route: command.Route{RPCKind: command.RPCTurnStart, DeliveryMode: command.ModeCLIStart,
		ManagedSessionID: session, SessionEpoch: 1}})
	if res.Outcome != "started" {
		s.t.Fatalf("delivery: %s %s", res.Outcome, del.NotEligible)
	}
	return del
}

func (s *sessions) session(id string) *aggregate.Session {
	s.t.Helper()
	var out *aggregate.Session
	_ = s.e.Read(func(r engine.Snapshot) error {
		st, err := r.State(events.KindSession, id)
		if err != nil {
			s.t.Fatal(err)
		}
		out, _ = st.(*aggregate.Session)
		return nil
	})
	if out == nil {
		s.t.Fatalf("no session %s", id)
	}
	return out
}

// attach runs AttachSession and returns its result, failing the test on
// an unexpected outcome.
func (s *sessions) attach(c codex.AttachSession, want engine.Outcome) codex.AttachResult {
	s.t.Helper()
	r, res := sessAnswer[codex.AttachResult](s, c)
	if res.Outcome != want {
		s.t.Fatalf("attach %s: outcome %s (%v), want %s", c.ThreadID, res.Outcome, r.Refusal, want)
	}
	return r
}

func types(res engine.Result) []string {
	var out []string
	for _, e := range res.Events {
		out = append(out, e.Type)
	}
	return out
}

var (
	no      = events.AllowFalse
	yes     = events.AllowTrue
	unknown = events.AllowUnknown
	auto    = events.SessionProfile{}
	strict  = codex.Reading{Current: events.Permissions{AllowsApproval: no, AllowsNetwork: no, AllowsWriteAccess: no}, Snapshot: events.RawJSON(`{"approvalPolicy":"never"}`)}
)

// Epochs number provably continuous streams: 1 at creation; the same
// instance keeps it; every new instance advances it, with the reason the
// log proves (the instance exited under this daemon, or the daemon that
// ran it is gone).
func TestSession_EpochFollowsTheInstance(t *testing.T) {
	s := newSessions(t)
	s.started("i1")
	r := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome)
	if got := s.session(r.SessionID); got.Epoch != 1 || got.AppServerInstance != "i1" || got.State != fsm.SessionLive || got.BoundThreadID != "T" {
		t.Fatalf("created: %+v", got)
	}
	if res := s.started("i1"); res.Outcome != "already_recorded" || len(res.Events) != 0 {
		t.Fatalf("the same instance recorded again: %s %v", res.Outcome, types(res))
	}
	if got := s.session(r.SessionID); got.Epoch != 1 {
		t.Fatalf("the same instance advanced the epoch to %d", got.Epoch)
	}

	s.exec(codex.AppServerExited{Nonce: "i1", Reason: codex.ExitExited, Status: "signal: killed"})
	res := s.started("i2")
	if want := []string{"appserver.started", "session.epoch_advanced"}; !slices.Equal(types(res), want) {
		t.Fatalf("restart: %v, want %v", types(res), want)
	}
	got := s.session(r.SessionID)
	if got.Epoch != 2 || got.AppServerInstance != "i2" || got.EpochReason != "app-server restarted: a new instance is a new event stream" {
		t.Fatalf("after a restart: %+v", got)
	}
	if got.Current != (events.Permissions{}) || got.CurrentProven() {
		t.Fatalf("the old epoch's reading still counts: %+v", got.Current)
	}

	res = s.exec(codex.RecoverSessions{})
	if want := []string{"appserver.exited", "session.detached"}; !slices.Equal(types(res), want) {
		t.Fatalf("daemon start-up after a crash: %v, want %v", types(res), want)
	}
	s.started("i3")
	got = s.session(r.SessionID)
	if got.Epoch != 3 || got.EpochReason != "daemon restarted: the event stream cannot be proven continuous" || got.State != fsm.SessionDetached {
		t.Fatalf("after a daemon crash: %+v", got)
	}
	// A daemon that stops stops its app-server and records it.
	s.exec(codex.AppServerExited{Nonce: "i3", Reason: codex.ExitStopped})
	if res := s.exec(codex.RecoverSessions{}); len(res.Events) != 0 {
		t.Fatalf("start-up after a clean stop: %v", types(res))
	}
	s.started("i4")
	if got = s.session(r.SessionID); got.Epoch != 4 || got.EpochReason != "daemon restarted: the event stream cannot be proven continuous" {
		t.Fatalf("after a daemon stop and start: %+v", got)
	}
}

// One non-retired session per thread: a second foreground is refused, a
// reattach reuses the session, and a new-thread session whose thread never
// had a turn retires at detach so the id may be bound again.
func TestSession_OnePerThread(t *testing.T) {
	s := newSessions(t)
	s.started("i1")
	first := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome)
	r := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1", Reading: &strict}, codex.SessionRefused)
	if r.Refusal.Code != errs.EBUSY || r.SessionID != first.SessionID {
		t.Fatalf("a second foreground: %+v", r)
	}
	if res := s.exec(codex.DetachSession{SessionID: first.SessionID, Reason: "foreground exited"}); res.Outcome != "detached" {
		t.Fatalf("detach: %s", res.Outcome)
	}
	if res := s.exec(codex.DetachSession{SessionID: first.SessionID}); res.Outcome != "already_detached" || len(res.Events) != 0 {
		t.Fatalf("detach twice: %s", res.Outcome)
	}
	again := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1", Reading: &strict}, codex.SessionAttachedOutcome)
	if again.SessionID != first.SessionID {
		t.Fatalf("reattach made session %s, not %s", again.SessionID, first.SessionID)
	}

	n := s.attach(codex.AttachSession{Mode: codex.ModeNewThread, ThreadID: "N", Instance: "i1"}, codex.SessionCreatedOutcome)
	if got := s.session(n.SessionID); got.Mode != codex.ModeNewThread || got.SnapshotRevision != 0 || got.Startup != (events.Permissions{}) {
		t.Fatalf("new-thread session: %+v", got)
	}
	if res := s.exec(codex.DetachSession{SessionID: n.SessionID, NeverMaterialized: true}); res.Outcome != "retired" {
		t.Fatalf("detach of a thread without a turn: %s", res.Outcome)
	}
	m := s.attach(codex.AttachSession{Mode: codex.ModeNewThread, ThreadID: "N", Instance: "i1"}, codex.SessionCreatedOutcome)
	if m.SessionID == n.SessionID {
		t.Fatal("a retired session was reused")
	}
	// A stale instance cannot bind anything.
	_, err := s.e.Execute(context.Background(), engine.Meta{}, codex.AttachSession{Mode: codex.ModeNewThread, ThreadID: "X", Instance: "gone"})
	if errs.CodeOf(err) != errs.ESTALE {
		t.Fatalf("attach on an instance that is not running: %v", err)
	}
}

// The startup cap: explicit values at creation, "auto" ones pinned by
// their first known reading and never changed by later ones; effective
// is the tighter of cap and current; drift is reported every time and
// recorded once per change.
func TestSession_PermissionPinsAndDrift(t *testing.T) {
	s := newSessions(t)
	s.started("i1")
	first := codex.Reading{Current: events.Permissions{AllowsApproval: no, AllowsNetwork: yes, AllowsWriteAccess: unknown}, Snapshot: events.RawJSON(`{"n":1}`)}
	r := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1",
		Profile: events.SessionProfile{Network: "false"}, Reading: &first}, codex.SessionCreatedOutcome)
	if !slices.Equal(r.Obs.Pinned, []string{"approval"}) {
		t.Fatalf("pinned %v, want approval only (network is explicit, write access unknown)", r.Obs.Pinned)
	}
	want := events.Permissions{AllowsApproval: no, AllowsNetwork: no, AllowsWriteAccess: unknown}
	if r.Obs.Startup != want || r.Obs.Effective != want {
		t.Fatalf("startup %+v effective %+v, want %+v for both", r.Obs.Startup, r.Obs.Effective, want)
	}
	if r.Obs.Drift == nil || r.Obs.Drift.Direction != "widened" || !slices.Equal(r.Obs.Drift.Dimensions, []string{"network"}) || !r.Obs.Drift.Recorded {
		t.Fatalf("drift of network: %+v", r.Obs.Drift)
	}

	obs := func(p events.Permissions) (codex.Observation, []string) {
		t.Helper()
		o, res := sessAnswer[codex.Observation](s, codex.ObservePermissions{SessionID: r.SessionID, Instance: "i1", Reading: codex.Reading{Current: p, Snapshot: events.RawJSON(`{}`)}})
		return o, types(res)
	}
	o, ev := obs(first.Current)
	if o.Drift == nil || o.Drift.Recorded || !slices.Equal(ev, []string{"session.permission_observed"}) {
		t.Fatalf("an unchanged drift: %+v %v", o.Drift, ev)
	}
	o, ev = obs(events.Permissions{AllowsApproval: yes, AllowsNetwork: no, AllowsWriteAccess: yes})
	if !slices.Equal(o.Pinned, []string{"write_access"}) || o.Startup.AllowsApproval != no {
		t.Fatalf("second reading: pinned %v, startup %+v", o.Pinned, o.Startup)
	}
	if o.Effective != (events.Permissions{AllowsApproval: no, AllowsNetwork: no, AllowsWriteAccess: yes}) {
		t.Fatalf("effective %+v", o.Effective)
	}
	if o.Drift == nil || o.Drift.Direction != "widened" || !slices.Equal(o.Drift.Dimensions, []string{"approval"}) || !slices.Contains(ev, "session.permission_drifted") {
		t.Fatalf("approval widened: %+v %v", o.Drift, ev)
	}
	o, _ = obs(events.Permissions{AllowsApproval: no, AllowsNetwork: no, AllowsWriteAccess: no})
	if o.Drift == nil || o.Drift.Direction != "tightened" || !slices.Equal(o.Drift.Dimensions, []string{"write_access"}) || !o.Drift.Recorded {
		t.Fatalf("write access tightened: %+v", o.Drift)
	}
	o, ev = obs(events.Permissions{AllowsApproval: no, AllowsNetwork: no, AllowsWriteAccess: yes})
	if o.Drift != nil || len(ev) != 1 {
		t.Fatalf("back to the cap: %+v %v", o.Drift, ev)
	}
	if got := s.session(r.SessionID); got.SnapshotRevision != 5 || got.DriftDirection != "" || string(got.StartupSnapshot) != `{"n":1}` {
		t.Fatalf("session after five readings: %+v", got)
	}
	// A reading from another stream proves nothing about this epoch.
	_, err := s.e.Execute(context.Background(), engine.Meta{}, codex.ObservePermissions{SessionID: r.SessionID, Instance: "i2", Reading: strict})
	if errs.CodeOf(err) != errs.ESTALE {
		t.Fatalf("a reading from another instance: %v", err)
	}
}

// A bootstrap profile is never rewritten in place: with nothing pending
// the old session retires and a new one starts; with a foreground attached
// or a delivery in flight the attach is refused session_profile_mismatch.
// "auto" matches any cap.
func TestSession_ProfileMismatch(t *testing.T) {
	s := newSessions(t)
	s.started("i1")
	mk := func(thread string, prof events.SessionProfile) codex.AttachSession {
		return codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: thread, Instance: "i1", Profile: prof, Reading: &strict}
	}
	old := s.attach(mk("T", events.SessionProfile{Network: "false"}), codex.SessionCreatedOutcome)
	r := s.attach(mk("T", events.SessionProfile{Network: "true"}), codex.SessionRefused)
	if r.Refusal.Code != errs.SessionProfileMismatch {
		t.Fatalf("another profile while a foreground is attached: %v", r.Refusal)
	}
	s.exec(codex.DetachSession{SessionID: old.SessionID, Reason: "foreground exited"})
	s.attach(mk("T", auto), codex.SessionAttachedOutcome)
	s.exec(codex.DetachSession{SessionID: old.SessionID, Reason: "foreground exited"})
	s.attach(mk("T", events.SessionProfile{Network: "false", Approval: "false"}), codex.SessionAttachedOutcome) // approval was pinned false
	s.exec(codex.DetachSession{SessionID: old.SessionID, Reason: "foreground exited"})

	// A delivery in flight on the thread blocks the retirement.
	d := s.deliver("T", old.SessionID)
	r = s.attach(mk("T", events.SessionProfile{Network: "true"}), codex.SessionRefused)
	if r.Refusal.Code != errs.SessionProfileMismatch || r.SessionID != old.SessionID {
		t.Fatalf("another profile while a delivery is in flight: %+v", r)
	}
	s.exec(command.RecordOutcome{Config: immediate, AttemptID: d.AttemptID, RPCRequestID: d.RPCRequestID, ManagedSessionID: old.SessionID, SessionEpoch: 1,
		Outcome: command.RejectedBefore, Reason: "busy"})
	s.exec(command.CloseHead{Config: immediate, ThreadID: "T", Reason: command.CloseOperatorUnconfirmed})

	r, res := sessAnswer[codex.AttachResult](s, mk("T", events.SessionProfile{Network: "true"}))
	if res.Outcome != codex.SessionReplacedOutcome || r.Retired != old.SessionID || r.SessionID == old.SessionID {
		t.Fatalf("another profile with nothing pending: %s %+v", res.Outcome, r)
	}
	if got := s.session(old.SessionID); got.State != fsm.SessionRetired {
		t.Fatalf("old session %s", got.State)
	}
	if got := s.session(r.SessionID); got.Replaces != old.SessionID || got.Startup.AllowsNetwork != yes {
		t.Fatalf("new session %+v", got)
	}
}

// immediate delivers as soon as a job is ready.
var immediate = func() command.DeliveryConfig { c := enginetest.DeliveryConfig(); c.MaxWaitWindow = 0; return c }()

// A manual batch of the thread parks a session whose live part ended and
// refuses every attach (session_pending_manual_resolution) until an
// operator closes it.
func TestSession_PendingManualResolution(t *testing.T) {
	s := newSessions(t)
	s.started("i1")
	r := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome)
	del := s.deliver("T", r.SessionID)
	s.exec(command.RecordOutcome{Config: immediate, AttemptID: del.AttemptID, RPCRequestID: del.RPCRequestID, ManagedSessionID: r.SessionID, SessionEpoch: 1,
		Outcome: command.AcceptanceUnknown, Reason: "no answer"})

	if res := s.exec(codex.SettleSessions{}); len(res.Events) != 0 {
		t.Fatalf("a live session parked: %v", types(res))
	}
	if res := s.exec(codex.DetachSession{SessionID: r.SessionID, Reason: "foreground exited"}); res.Outcome != "parked" {
		t.Fatalf("detach with a manual batch: %s", res.Outcome)
	}
	got := s.session(r.SessionID)
	if got.State != fsm.SessionParked || got.ParkedBatchID != del.BatchID {
		t.Fatalf("session %+v", got)
	}
	refused := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1", Reading: &strict}, codex.SessionRefused)
	if refused.Refusal.Code != errs.SessionPendingManualResolution || refused.SessionID != r.SessionID {
		t.Fatalf("attach to a parked session: %+v", refused)
	}
	// Not even a new profile gets a second session for the thread.
	refused = s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1", Profile: events.SessionProfile{Network: "true"}, Reading: &strict}, codex.SessionRefused)
	if refused.Refusal.Code != errs.SessionPendingManualResolution {
		t.Fatalf("attach with another profile to a parked session: %+v", refused)
	}

	s.exec(command.CloseHead{Config: immediate, ThreadID: "T", Reason: command.CloseOperatorUnconfirmed})
	if ok, err := s.readUnsettled(); err != nil || !ok {
		t.Fatalf("unsettled after the close: %v %v", ok, err)
	}
	if res := s.exec(codex.SettleSessions{}); !slices.Equal(types(res), []string{"session.unparked"}) {
		t.Fatalf("settle after the close: %v", types(res))
	}
	s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1", Reading: &strict}, codex.SessionAttachedOutcome)
}

func (s *sessions) readUnsettled() (ok bool, err error) {
	_ = s.e.Read(func(r engine.Snapshot) error { ok, err = codex.SessionsUnsettled(r); return nil })
	return ok, err
}

// A new instance ends the old epoch's stream: the attempt waiting on it
// (an answer or an accepted turn's end) is abandoned and its batch parked
// in the same append; nothing is resent.
func TestSession_EpochAdvanceParksWhatWaitedOnTheOldStream(t *testing.T) {
	s := newSessions(t)
	s.started("i1")
	r := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome)
	del := s.deliver("T", r.SessionID)
	s.exec(command.RecordOutcome{Config: immediate, AttemptID: del.AttemptID, RPCRequestID: del.RPCRequestID, ManagedSessionID: r.SessionID, SessionEpoch: 1,
		Outcome: command.Accepted, TurnID: "turn-1", Tracks: true})

	s.exec(codex.AppServerExited{Nonce: "i1", Reason: codex.ExitExited})
	res := s.started("i2")
	if want := []string{"appserver.started", "session.epoch_advanced", "attempt.abandoned", "batch.replay_policy_changed"}; !slices.Equal(types(res), want) {
		t.Fatalf("restart with a tracked turn: %v, want %v", types(res), want)
	}
	// A late turn/completed from the old epoch changes nothing.
	late := s.exec(command.ObserveTurn{Config: immediate, AttemptID: del.AttemptID, TurnID: "turn-1", Event: "turn_completed", ManagedSessionID: r.SessionID, SessionEpoch: 1})
	if late.Outcome != command.LateIgnored || len(late.Events) != 0 {
		t.Fatalf("a late completion: %s", late.Outcome)
	}
}

func TestCheckProfile(t *testing.T) {
	p, err := codex.CheckProfile(events.SessionProfile{Network: "true"})
	if err != nil || p != (events.SessionProfile{Approval: "auto", Network: "true", WriteAccess: "auto"}) {
		t.Fatalf("%+v %v", p, err)
	}
	if _, err := codex.CheckProfile(events.SessionProfile{Approval: "yes"}); errs.CodeOf(err) != errs.EINVAL {
		t.Fatalf("a bad value: %v", err)
	}
}

// A stale session (its thread unreachable) is left alone by a new
// instance; a foreground reattaching it makes it live and moves it to the
// running instance's stream, with a fresh reading.
func TestSession_StaleReattaches(t *testing.T) {
	s := newSessions(t)
	s.started("i1")
	r := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome)
	s.exec(codex.DetachSession{SessionID: r.SessionID, Reason: "foreground exited"})
	if res := s.exec(codex.MarkSessionStale{SessionID: r.SessionID, Reason: "thread/resume refused: active writer"}); res.Outcome != "stale" {
		t.Fatalf("mark stale: %s", res.Outcome)
	}
	s.exec(codex.AppServerExited{Nonce: "i1", Reason: codex.ExitExited})
	if res := s.started("i2"); !slices.Equal(types(res), []string{"appserver.started"}) {
		t.Fatalf("a new instance with a stale session: %v", types(res))
	}
	res := s.exec(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i2", Reading: &strict})
	if want := []string{"session.attached", "session.epoch_advanced", "session.permission_observed"}; res.Outcome != codex.SessionAttachedOutcome || !slices.Equal(types(res), want) {
		t.Fatalf("reattach a stale session: %s %v, want %v", res.Outcome, types(res), want)
	}
	if got := s.session(r.SessionID); got.State != fsm.SessionLive || got.Epoch != 2 || got.AppServerInstance != "i2" || !got.CurrentProven() {
		t.Fatalf("after the reattach: %+v", got)
	}
}

// Retired sessions stay, so the session listing pages like every other:
// following next lists each session once, in creation order, and a
// cursor that names no session is ENOENT.
func TestSession_ListingPages(t *testing.T) {
	s := newSessions(t)
	s.started("i1")
	var ids []string
	for i := range 7 {
		r := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: fmt.Sprintf("T%d", i), Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome)
		ids = append(ids, r.SessionID)
	}
	_ = s.e.Read(func(sn engine.Snapshot) error {
		var got []string
		pages := 0
		for after := ""; ; pages++ {
			page, err := query.Sessions(sn, query.SessionFilter{After: after, Limit: 3})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Sessions) == 0 || len(page.Sessions) > 3 {
				t.Fatalf("a page of %d sessions, limit 3", len(page.Sessions))
			}
			for _, v := range page.Sessions {
				got = append(got, v.ManagedSessionID)
			}
			if after = page.Next; after == "" {
				break
			}
		}
		if !slices.Equal(got, ids) || pages != 2 {
			t.Fatalf("%d pages listed %v, want %v in 3 pages", pages+1, got, ids)
		}
		if _, err := query.Sessions(sn, query.SessionFilter{After: "no-such-session"}); errs.CodeOf(err) != errs.ENOENT {
			t.Fatalf("a cursor naming no session: %v", err)
		}
		return nil
	})
}

// The reading a delivery was gated on goes into the log with its barrier,
// in one append, after the materialized attempt and before
// accept_pending. A reading that on the state the barrier is decided on
// would give other effective permissions than those gated, or that the
// session no longer takes (another instance), starts nothing and
// appends nothing.
func TestSession_ReadingRecordedWithTheBarrier(t *testing.T) {
	s := newSessions(t)
	s.started("i1")
	r := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "T", Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome)
	id, _ := sessAnswer[string](s, command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "k", Summary: "s", Policy: events.FailClosedPolicy})
	s.exec(command.CompleteJob{Config: immediate, JobID: id, Summary: "done"})
	gated := func(instance string, effective events.Permissions) command.Route {
		return command.Route{RPCKind: command.RPCTurnStart, DeliveryMode: command.ModeCLIStart, ManagedSessionID: r.SessionID, SessionEpoch: 1,
			Gate: &codex.GatedReading{ObservePermissions: codex.ObservePermissions{SessionID: r.SessionID, Instance: instance, Reading: strict},
				Effective: effective}}
	}
	wide := events.Permissions{AllowsApproval: yes, AllowsNetwork: no, AllowsWriteAccess: no}
	for _, route := range []command.Route{gated("i1", wide), gated("i2", r.Obs.Effective)} {
		head := s.e.Head()
		del, res := sessAnswer[command.Delivery](s, command.StartDelivery{Config: immediate, ThreadID: "T", Route: route})
		if res.Outcome != "not_eligible" || len(res.Events) != 0 || s.e.Head() != head {
			t.Fatalf("a reading that does not hold (%+v): %s %s, %d events", route.Gate, res.Outcome, del.NotEligible, len(res.Events))
		}
	}
	rev := s.session(r.SessionID).SnapshotRevision
	res := s.exec(command.StartDelivery{Config: immediate, ThreadID: "T", Route: gated("i1", r.Obs.Effective)})
	want := []string{"attempt.prepared", "batch.materialized", "session.permission_observed", "attempt.accept_pending"}
	if res.Outcome != "started" || !slices.Equal(types(res), want) {
		t.Fatalf("started with the reading: %s %v, want %v in one append", res.Outcome, types(res), want)
	}
	if got := s.session(r.SessionID).SnapshotRevision; got != rev+1 {
		t.Fatalf("snapshot revision %d after the barrier, want %d", got, rev+1)
	}
}
