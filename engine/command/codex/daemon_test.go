package codex_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

func (s *sessions) daemonStarted(nonce string) engine.Result {
	s.t.Helper()
	return s.exec(codex.AppServerStarted{Started: events.AppServerStarted{Transport: codex.TransportCodexDaemon, PID: 7, Nonce: nonce, ProbePassed: true}})
}

func (s *sessions) bind(thread, instance string, r codex.Reading, want engine.Outcome) codex.AttachResult {
	s.t.Helper()
	res, out := sessAnswer[codex.AttachResult](s, codex.BindDaemonSession{ThreadID: thread, Instance: instance, Reading: r, ThreadSource: "cli"})
	if out.Outcome != want {
		s.t.Fatalf("bind %s on %s: outcome %s (%v), want %s", thread, instance, out.Outcome, res.Refusal, want)
	}
	return res
}

var wide = codex.Reading{Current: events.Permissions{AllowsApproval: yes, AllowsNetwork: no, AllowsWriteAccess: yes}, Snapshot: events.RawJSON(`{"approvalPolicy":"on-request"}`)}

// A thread reached through the user's Codex daemon gets a session that
// starts detached (there is no foreground), at epoch 1 on the daemon's
// instance, every dimension pinned by the reading, the thread's source
// kept. Binding it again on the same instance only records the reading.
func TestDaemonSession_CreatedDetached(t *testing.T) {
	s := newSessions(t)
	s.daemonStarted("d1")
	r := s.bind("T", "d1", wide, codex.SessionCreatedOutcome)
	ses := s.session(r.SessionID)
	if ses.State != fsm.SessionDetached || ses.Mode != codex.ModeCodexDaemon || ses.Epoch != 1 || ses.AppServerInstance != "d1" || ses.ThreadSource != "cli" {
		t.Fatalf("a daemon session: %+v", ses)
	}
	if ses.Startup != wide.Current || ses.Effective() != wide.Current || ses.SnapshotRevision != 1 {
		t.Fatalf("the first reading pins every dimension: startup %+v effective %+v", ses.Startup, ses.Effective())
	}
	again := s.bind("T", "d1", strict, codex.SessionObservedOutcome)
	if again.SessionID != r.SessionID || again.Obs == nil || again.Obs.Drift == nil || again.Obs.Drift.Direction != "tightened" {
		t.Fatalf("the same instance again: %+v", again)
	}
	if ses := s.session(r.SessionID); ses.Epoch != 1 || ses.SnapshotRevision != 2 || ses.Effective() != strict.Current {
		t.Fatalf("after a tighter reading: %+v", ses)
	}
}

// Refusals and moves of an existing session, one row each: nothing moves
// a live session (its foreground's app-server delivers), a manual batch
// parks it, a stale one is replaced, a detached one of another instance
// advances its epoch onto the daemon's.
func TestDaemonSession_ExistingSessions(t *testing.T) {
	for _, c := range []struct {
		name    string
		setup   func(s *sessions, thread string) string // returns the session
		want    engine.Outcome
		code    errs.Code
		state   fsm.SessionState
		epoch   uint64
		retired bool
	}{
		{name: "live under cbth cli run", want: codex.SessionRefused, code: errs.EBUSY, state: fsm.SessionLive, epoch: 1,
			setup: func(s *sessions, th string) string {
				return s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: th, Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome).SessionID
			}},
		{name: "detached on the shared app-server", want: codex.SessionReboundOutcome, state: fsm.SessionDetached, epoch: 2,
			setup: func(s *sessions, th string) string {
				id := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: th, Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome).SessionID
				s.exec(codex.DetachSession{SessionID: id, Reason: "foreground exited"})
				return id
			}},
		{name: "stale", want: codex.SessionReplacedOutcome, state: fsm.SessionRetired, epoch: 1, retired: true,
			setup: func(s *sessions, th string) string {
				id := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: th, Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome).SessionID
				s.exec(codex.MarkSessionStale{SessionID: id, Reason: "thread/resume refused: active writer"})
				return id
			}},
		{name: "a manual batch", want: codex.SessionRefused, code: errs.SessionPendingManualResolution, state: fsm.SessionParked, epoch: 1,
			setup: func(s *sessions, th string) string {
				id := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: th, Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome).SessionID
				s.exec(codex.DetachSession{SessionID: id, Reason: "foreground exited"})
				del := s.deliver(th, id)
				s.exec(command.RecordOutcome{Config: immediate, AttemptID: del.AttemptID, RPCRequestID: del.RPCRequestID,
					ManagedSessionID: id, SessionEpoch: 1, Outcome: command.AcceptanceUnknown, Reason: "no answer"})
				return id
			}},
		{name: "a delivery in flight", want: codex.SessionRefused, code: errs.EBUSY, state: fsm.SessionDetached, epoch: 1,
			setup: func(s *sessions, th string) string {
				id := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: th, Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome).SessionID
				s.exec(codex.DetachSession{SessionID: id, Reason: "foreground exited"})
				s.deliver(th, id)
				return id
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSessions(t)
			s.started("i1")
			s.daemonStarted("d1")
			id := c.setup(s, "T")
			r := s.bind("T", "d1", strict, c.want)
			if c.code != "" && (r.Refusal == nil || r.Refusal.Code != c.code) {
				t.Fatalf("refusal %v, want %s", r.Refusal, c.code)
			}
			old := s.session(id)
			if old.State != c.state || old.Epoch != c.epoch {
				t.Fatalf("session after binding: %s at epoch %d, want %s at %d", old.State, old.Epoch, c.state, c.epoch)
			}
			if c.want == codex.SessionReboundOutcome && (old.AppServerInstance != "d1" || old.CurrentEpoch != 2) {
				t.Fatalf("rebound session: %+v", old)
			}
			if c.retired {
				if r.Retired != id || r.SessionID == id || s.session(r.SessionID).State != fsm.SessionDetached {
					t.Fatalf("the stale session was not replaced: %+v", r)
				}
			}
		})
	}
}

// An instance recorded for one transport ends and advances only what
// belongs to that transport: the user's Codex daemon restarting leaves the
// shared app-server and its sessions alone, and the other way round. A
// daemon session's in-flight delivery on the old daemon parks with it.
func TestDaemonSession_TransportsAreSeparateStreams(t *testing.T) {
	s := newSessions(t)
	s.started("i1")
	s.daemonStarted("d1")
	shared := s.attach(codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: "S", Instance: "i1", Reading: &strict}, codex.SessionCreatedOutcome).SessionID
	daemon := s.bind("D", "d1", strict, codex.SessionCreatedOutcome).SessionID
	del := s.deliver("D", daemon)

	res := s.daemonStarted("d2")
	if got := types(res); !slices.Contains(got, events.TypeAppServerExited) || count(got, events.TypeSessionEpochAdvanced) != 1 {
		t.Fatalf("a new daemon instance appended %v", got)
	}
	if ses := s.session(shared); ses.Epoch != 1 || ses.AppServerInstance != "i1" {
		t.Fatalf("the shared app-server's session moved: %+v", ses)
	}
	if ses := s.session(daemon); ses.Epoch != 2 || ses.AppServerInstance != "d2" {
		t.Fatalf("the daemon's session: %+v", ses)
	}
	var running []string
	_ = s.e.Read(func(v engine.Snapshot) error {
		for _, tr := range []string{codex.TransportShared, codex.TransportCodexDaemon} {
			if a, _ := codex.RunningAppServer(v, tr); a != nil {
				running = append(running, a.ID)
			}
		}
		if a, _ := command.LiveAttempt(v, "D"); a != nil {
			t.Errorf("the attempt on the old daemon's stream is still live: %s", a.State)
		}
		if a, _ := command.LiveAttempt(v, "S"); a != nil {
			t.Errorf("thread S has an attempt: %s", a.State)
		}
		return nil
	})
	if !slices.Equal(running, []string{"i1", "d2"}) {
		t.Fatalf("running instances %v", running)
	}
	_ = del

	res = s.started("i2")
	if got := types(res); count(got, events.TypeSessionEpochAdvanced) != 1 {
		t.Fatalf("a new shared instance appended %v", got)
	}
	if ses := s.session(daemon); ses.Epoch != 2 {
		t.Fatalf("the shared app-server's restart moved the daemon's session: %+v", ses)
	}
	// An unknown transport is refused.
	if _, err := s.e.Execute(t.Context(), engine.Meta{Actor: events.ActorAdapter}, codex.AppServerStarted{Started: events.AppServerStarted{Transport: "ssh", Nonce: "x"}}); errs.CodeOf(err) != errs.EINVAL {
		t.Fatalf("an unknown transport: %v", err)
	}
	// BindDaemonSession names the running daemon instance only.
	if _, err := s.e.Execute(t.Context(), engine.Meta{Actor: events.ActorAdapter}, codex.BindDaemonSession{ThreadID: "E", Instance: "i2", Reading: strict}); errs.CodeOf(err) != errs.ESTALE {
		t.Fatalf("binding on the shared instance: %v", err)
	}
}

// Trust is the user's, per thread: given, changed and taken back as
// events; the same trust again, or taking back none, appends nothing;
// an unknown trust is refused.
func TestThreadTrust(t *testing.T) {
	s := newSessions(t)
	trustOf := func() string {
		var tr string
		_ = s.e.Read(func(v engine.Snapshot) (err error) {
			tr, err = codex.TrustOf(v, "T")
			return err
		})
		return tr
	}
	for _, step := range []struct {
		d     engine.Decider
		want  engine.Outcome
		trust string
	}{
		{codex.UntrustThread{ThreadID: "T"}, codex.TrustUnchangedOutcome, ""},
		{codex.TrustThread{ThreadID: "T", Trust: events.TrustOwnPermissions}, codex.TrustedOutcome, events.TrustOwnPermissions},
		{codex.TrustThread{ThreadID: "T", Trust: events.TrustOwnPermissions}, codex.TrustUnchangedOutcome, events.TrustOwnPermissions},
		{codex.TrustThread{ThreadID: "T", Trust: events.TrustStrict}, codex.TrustedOutcome, events.TrustStrict},
		{codex.UntrustThread{ThreadID: "T"}, codex.UntrustedOutcome, ""},
		{codex.TrustThread{ThreadID: "T", Trust: events.TrustOwnPermissions}, codex.TrustedOutcome, events.TrustOwnPermissions},
	} {
		res := s.exec(step.d)
		if res.Outcome != step.want || trustOf() != step.trust {
			t.Fatalf("%+v: %s, trust %q; want %s, %q", step.d, res.Outcome, trustOf(), step.want, step.trust)
		}
		if (step.want == codex.TrustUnchangedOutcome) != (len(res.Events) == 0) {
			t.Fatalf("%+v appended %v", step.d, types(res))
		}
	}
	for _, bad := range []engine.Decider{codex.TrustThread{ThreadID: "T", Trust: "all"}, codex.TrustThread{ThreadID: "", Trust: events.TrustStrict}} {
		if _, err := s.e.Execute(t.Context(), engine.Meta{Actor: events.ActorOperator}, bad); errs.CodeOf(err) != errs.EINVAL {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
}

func count(list []string, v string) int {
	n := 0
	for _, x := range list {
		if x == v {
			n++
		}
	}
	return n
}

// A result handed to Codex's own queue is accepted and closed in one
// append: handoff_recorded, naming the queued item, its attempt closed,
// the thread's next batch promoted.
func TestDaemonSession_QueueHandoffClosesTheBatch(t *testing.T) {
	s := newSessions(t)
	s.daemonStarted("d1")
	id := s.bind("T", "d1", strict, codex.SessionCreatedOutcome).SessionID
	del := s.deliver("T", id)
	next, _ := sessAnswer[string](s, command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "k", Summary: "s", Policy: events.FailClosedPolicy})
	s.exec(command.CompleteJob{Config: immediate, JobID: next, Summary: "later"})
	res := s.exec(command.RecordOutcome{Config: immediate, AttemptID: del.AttemptID, RPCRequestID: del.RPCRequestID,
		ManagedSessionID: id, SessionEpoch: 1, Outcome: command.Accepted, Handoff: "q-1", CodexHome: "/home/u/.codex"})
	got := types(res)
	for _, want := range []string{events.TypeAttemptAccepted, events.TypeBatchDeliveryAccepted, events.TypeBatchQueuedToCodex, events.TypeAttemptClosed, events.TypeBatchPromoted} {
		if count(got, want) != 1 {
			t.Fatalf("the hand-off appended %v; want one %s", got, want)
		}
	}
	var b *aggregate.Batch
	_ = s.e.Read(func(v engine.Snapshot) error {
		st, _ := v.State(events.KindBatch, del.BatchID)
		b, _ = st.(*aggregate.Batch)
		if a, _ := command.LiveAttempt(v, "T"); a != nil {
			t.Errorf("the handed-off attempt is still live: %s", a.State)
		}
		return nil
	})
	if b.State != fsm.BatchClosed || b.CloseReason != command.CloseHandoffRecorded || !strings.Contains(b.CloseDetail, "q-1") || !strings.Contains(b.CloseDetail, "own permissions") {
		t.Fatalf("the handed-off batch: %s %s %q", b.State, b.CloseReason, b.CloseDetail)
	}
}

// The stream of the user's Codex daemon is gone when its instance ends,
// whether the daemon exited or cbth's own daemon restarted: a delivery
// waiting on it is abandoned and its batch parked at once, never resent.
// (The shared app-server's exit leaves that to the next instance's start,
// which its supervisor makes.) At start-up every instance the last daemon
// followed ends, of both transports.
func TestDaemonSession_LostStreamParksAtOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(s *sessions)
	}{
		{"the Codex daemon exited", func(s *sessions) {
			s.exec(codex.AppServerExited{Nonce: "d1", Reason: codex.ExitExited})
		}},
		{"cbth's daemon restarted", func(s *sessions) { s.exec(codex.RecoverSessions{}) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSessions(t)
			s.started("i1")
			s.daemonStarted("d1")
			id := s.bind("D", "d1", strict, codex.SessionCreatedOutcome).SessionID
			del := s.deliver("D", id)
			s.exec(command.RecordOutcome{Config: immediate, AttemptID: del.AttemptID, RPCRequestID: del.RPCRequestID,
				ManagedSessionID: id, SessionEpoch: 1, Outcome: command.Accepted, TurnID: "turn-1", Tracks: true})
			c.end(s)
			_ = s.e.Read(func(v engine.Snapshot) error {
				if a, _ := command.LiveAttempt(v, "D"); a != nil {
					t.Errorf("the delivery on the lost stream is still %s", a.State)
				}
				st, _ := v.State(events.KindBatch, del.BatchID)
				if b := st.(*aggregate.Batch); b.ReplayPolicy != aggregate.ReplayManual {
					t.Errorf("its batch is %s, want parked", b.ReplayPolicy)
				}
				for _, tr := range []string{codex.TransportShared, codex.TransportCodexDaemon} {
					if a, _ := codex.RunningAppServer(v, tr); a != nil && a.ID == "d1" {
						t.Errorf("the daemon's instance still runs")
					}
				}
				return nil
			})
		})
	}
}
