package clitarget

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Gate implements target.Target from what is known without asking Codex.
// A thread whose managed session is live (a `cbth cli run` foreground is
// attached) goes through the shared app-server: it runs, passed the
// probe, is the instance the session's epoch numbers, and the thread is
// not running a turn of its own. Any other thread goes through the
// user's Codex daemon when that transport is on (daemonGate). The
// permission gate needs a fresh reading, so it is Prepare's.
func (t *Target) Gate(ctx context.Context, h target.Head) target.Gate {
	if t.cfg.Unavailable != nil {
		return target.Gate{Reason: t.reason("codex cannot run: %v", t.cfg.Unavailable)}
	}
	s, err := t.session(h.ThreadID)
	if err != nil {
		return target.Gate{Reason: t.reason("read the thread's session: %v", err)}
	}
	if (s == nil || s.State != fsm.SessionLive) && t.cfg.CodexDaemon != nil {
		return t.daemonGate(h, s)
	}
	if s == nil {
		return target.Gate{Reason: t.reason("no managed session is bound to this thread (cbth cli run --bind-thread-id or --new-thread)")}
	}
	if s.State != fsm.SessionLive {
		return target.Gate{Reason: t.reason("managed session %s is %s; delivery waits for a foreground (cbth cli run --bind-thread-id %s)", s.ID, s.State, h.ThreadID)}
	}
	inst, probed := t.m.Current()
	switch {
	case inst == "":
		return target.Gate{Reason: t.reason("the shared codex app-server is not running")}
	case !probed:
		return target.Gate{Reason: t.reason("the codex app-server failed the capability probe")}
	case s.AppServerInstance != inst:
		return target.Gate{Reason: t.reason("managed session %s is at epoch %d of another app-server instance", s.ID, s.Epoch)}
	}
	if t.m.AwaitingFirstTurn(h.ThreadID) {
		// The thread's first turn wakes the scheduler when it ends (the
		// thread goes idle), so no retry time is needed.
		return target.Gate{Reason: t.reason(awaitingFirstTurn)}
	}
	if st := t.m.ThreadStatus(h.ThreadID); st == appserver.ThreadActive {
		if t.cfg.Steer && readOnlyBatch(h.Policy) {
			// Prepare classifies the running turn before anything is sent.
			return target.Gate{OK: true, Route: command.Route{RPCKind: command.RPCTurnSteer, DeliveryMode: command.ModeCLISteer,
				ManagedSessionID: s.ID, SessionEpoch: s.Epoch}}
		}
		return target.Gate{Reason: t.reason("a turn runs on the thread; delivery waits until it is idle")}
	}
	return target.Gate{OK: true, Route: command.Route{RPCKind: command.RPCTurnStart, DeliveryMode: command.ModeCLIStart,
		ManagedSessionID: s.ID, SessionEpoch: s.Epoch}}
}

// session is the thread's non-retired managed session, or nil.
func (t *Target) session(thread string) (*aggregate.Session, error) {
	var s *aggregate.Session
	err := t.eng.Read(func(v engine.Snapshot) error {
		var err error
		s, err = codex.SessionOf(v, thread)
		return err
	})
	return s, err
}

// trustOf is the thread's trust: the user's for that thread, else the
// home's.
func (t *Target) trustOf(thread string) (string, error) {
	var tr string
	err := t.eng.Read(func(v engine.Snapshot) error {
		var err error
		tr, err = codex.TrustOf(v, thread)
		return err
	})
	if tr == "" {
		tr = t.cfg.Trust
	}
	if tr == "" {
		tr = events.TrustStrict
	}
	return tr, err
}

// awaitingFirstTurn is the gate's reason while the thread of a
// `cbth cli run --new-thread` has not begun its first turn. Codex writes
// a thread's rollout when that turn starts; before it, the daemon could
// start a turn on the thread but cannot read its permissions (no
// thread/resume, and nothing else reports them), and a turn/start that
// pinned them would rewrite what the user's own turns get. So the result
// waits, the session stays live, and it goes once the first turn ended.
const awaitingFirstTurn = "awaiting_first_turn: Codex has no rollout of this new thread before its first turn, so its permissions cannot be read; delivery goes once the user's first turn has ended"

// readOnlyBatch reports whether a batch's policy lets it be steered into
// a running turn: it only reads, and needs no approval, network or write.
func readOnlyBatch(p events.DeliveryPolicy) bool {
	return p.ReadOnly && !p.RequiresApproval && !p.RequiresNetwork && !p.RequiresWriteAccess
}

// RiskView is the seed's classification of the turn running on a thread,
// which a steer needs: only a read-only batch goes into a turn classified
// read_only_low_risk.
type RiskView struct {
	ActiveTurnID               string `json:"active_turn_id"`
	ActiveTurnKind             string `json:"active_turn_kind"`
	ActiveTurnRequiresApproval bool   `json:"active_turn_requires_approval"`
	ActiveTurnRequiresNetwork  bool   `json:"active_turn_requires_network"`
	ActiveTurnRequiresWrite    bool   `json:"active_turn_requires_write_access"`
	ActiveTurnRiskClass        string `json:"active_turn_risk_class"`
}

// riskView classifies the running turn from what Codex reports: the
// thread's current permissions bound what the turn can do (a turn of a
// thread with no approval, no network and a read-only sandbox can do
// none of them), and a turn waiting on an approval or on the user's input
// is not low-risk whatever they say. Anything unknown is "unknown".
func riskView(ref sessions.ThreadReading, turnID string) RiskView {
	cur := ref.Current.Values()
	v := RiskView{ActiveTurnID: turnID, ActiveTurnKind: "user_turn",
		ActiveTurnRequiresApproval: cur[0] != events.AllowFalse, ActiveTurnRequiresNetwork: cur[1] != events.AllowFalse,
		ActiveTurnRequiresWrite: cur[2] != events.AllowFalse, ActiveTurnRiskClass: "unknown"}
	waiting := len(ref.Thread.Thread.Status.ActiveFlags) > 0
	if turnID != "" && !waiting && !v.ActiveTurnRequiresApproval && !v.ActiveTurnRequiresNetwork && !v.ActiveTurnRequiresWrite {
		v.ActiveTurnRiskClass = "read_only_low_risk"
	}
	return v
}

// retryIn is how soon a head held back by a failed read is asked about
// again (the scheduler also asks on every change of the log).
const retryIn = 5 * time.Second

// Prepare implements target.Preparer: before every turn/start it reads the
// thread afresh (thread/resume), checks the thread is idle, and applies
// the permission gate to the fresh reading. Nothing reaches the thread
// and nothing is recorded here: the reading goes forward in the route
// (recorded with the barrier, or alone when the head does not go), and
// what the send needs in its Send.
func (t *Target) Prepare(ctx context.Context, h target.Head, g target.Gate) target.Gate {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if t.cfg.CodexDaemon != nil {
		s, err := t.session(h.ThreadID)
		if err != nil {
			return target.Gate{Reason: t.reason("read the thread's session: %v", err), Retry: t.now().Add(retryIn)}
		}
		if s == nil || s.State != fsm.SessionLive {
			return t.daemonPrepare(rctx, h, g, s)
		}
	}
	ref, held := t.read(rctx, t.m, g.Route.ManagedSessionID)
	if held != nil {
		return *held
	}
	if ref.Epoch != g.Route.SessionEpoch {
		return target.Gate{Reason: t.reason("the session's epoch moved on"), Retry: t.now()}
	}
	return t.gateReading(rctx, h, g, t.m, ref, true)
}

// read takes a fresh reading of a session's thread on ep, or says why the
// head is held: awaiting the thread's first turn, the thread proven out
// of reach (its proof goes to the scheduler to record), or a failed read
// (tried again).
func (t *Target) read(ctx context.Context, ep Sessions, sessionID string) (sessions.ThreadReading, *target.Gate) {
	ref, err := ep.Read(ctx, sessionID)
	if errors.Is(err, sessions.ErrAwaitingFirstTurn) {
		return ref, &target.Gate{Reason: t.reason(awaitingFirstTurn)}
	}
	var gone *sessions.Unreachable
	if errors.As(err, &gone) {
		// Codex's answer proves the thread out of reach: the scheduler
		// records the session stale.
		return ref, &target.Gate{Reason: t.reason("read the thread before turn/start: %v", err), Route: command.Route{Gate: &codex.StaleProof{MarkSessionStale: gone.Stale}}}
	}
	if err != nil {
		return ref, &target.Gate{Reason: t.reason("read the thread before turn/start: %v", err), Retry: t.now().Add(retryIn)}
	}
	return ref, nil
}

// gateReading lets a delivery through on a fresh reading taken on ep:
// the thread must be idle (or, with steer, run a read_only_low_risk
// turn), and its permissions must pass the thread's trust (pin). It
// answers with the send, which carries exactly those permissions.
//
// On the shared app-server (shared set) a thread the trust does not let
// through goes to the operator: the batch parks, as the seed's managed
// sessions want. Through the user's Codex daemon it is held instead, the
// reason naming the command that trusts the thread: the user started
// that thread as they liked, and trusting it lets the same result go.
func (t *Target) gateReading(ctx context.Context, h target.Head, g target.Gate, ep Sessions, ref sessions.ThreadReading, shared bool) target.Gate {
	// An interface holding a nil pointer is not nil: set the gate only
	// when there is a reading.
	var reading command.BarrierGate
	if ref.Record != nil {
		reading = &codex.GatedReading{ObservePermissions: *ref.Record, Effective: ref.Effective}
	}
	g.Route.Gate = reading
	steer := ""
	if ref.Thread.Thread.Status.Type == appserver.ThreadActive {
		held := target.Gate{Reason: t.reason("a turn runs on the thread; delivery waits until it is idle"), Route: command.Route{Gate: reading}}
		if !shared || !t.cfg.Steer || !readOnlyBatch(h.Policy) {
			return held
		}
		turnID := ""
		if c, err := ep.Client(ref.Instance); err == nil {
			if turns, err := listTurns(ctx, c, h.ThreadID); err == nil {
				for _, tu := range turns {
					if tu.Status == appserver.TurnInProgress {
						turnID = tu.ID
						break
					}
				}
			}
		}
		rv := riskView(ref, turnID)
		t.log.Info("active-turn risk view", "thread", h.ThreadID, "view", rv)
		if rv.ActiveTurnRiskClass != "read_only_low_risk" {
			held.Reason += fmt.Sprintf(" (steer refused: the running turn is %s)", rv.ActiveTurnRiskClass)
			return held
		}
		steer = turnID
		g.Route.RPCKind, g.Route.DeliveryMode = command.RPCTurnSteer, command.ModeCLISteer
	} else {
		g.Route.RPCKind, g.Route.DeliveryMode = command.RPCTurnStart, command.ModeCLIStart
	}
	trust, err := t.trustOf(h.ThreadID)
	if err != nil {
		return target.Gate{Reason: t.reason("read the thread's trust: %v", err), Route: command.Route{Gate: reading}, Retry: t.now().Add(retryIn)}
	}
	params, verdict := t.pin(ref, trust, h.ThreadID)
	switch {
	case verdict.park != "":
		return target.Gate{Park: true, Reason: verdict.park, Route: command.Route{Gate: reading}}
	case verdict.hold != "" && shared:
		return target.Gate{Park: true, Reason: verdict.hold, Route: command.Route{Gate: reading}}
	case verdict.hold != "":
		return target.Gate{Reason: verdict.hold, Route: command.Route{Gate: reading}}
	}
	params.ThreadID = h.ThreadID
	p := prep{ep: ep, instance: ref.Instance, session: ref.SessionID, epoch: ref.Epoch, params: params, steer: steer}
	g.Send = func(ctx context.Context, d command.Delivery) target.Result { return t.send(ctx, d, p) }
	return g
}

func permString(p events.Permissions) string {
	var parts []string
	for i, v := range p.Values() {
		parts = append(parts, events.DimensionNames[i]+"="+v.String())
	}
	return strings.Join(parts, " ")
}

// verdict is why a reading does not let a delivery through: held until
// something changes (the user trusts the thread, or tightens it), or
// parked for the operator.
type verdict struct{ hold, park string }

// pin decides the permissions the turn carries: always exactly the
// thread's own, as read, since a turn/start's settings stay with the
// thread for the user's later turns (spec/codex-cli.md section 5).
//
// Strict trust (the default): every effective dimension must be false,
// and so must the current reading (a current reading looser than the
// startup cap is widening drift; repeating the cap would narrow the
// thread behind the user's back). Otherwise the head is held, and the
// reason names the command that trusts the thread.
//
// Own-permissions trust: any permissions go, as the thread has them
// (the snapshots and drift records go on).
//
// Either way, settings that turn/start cannot repeat without changing
// them (a profile of the user's, or one that extends another; a writable
// root with a ".." component; a sandbox it cannot read) park the head.
func (t *Target) pin(ref sessions.ThreadReading, trust, thread string) (appserver.TurnStartParams, verdict) {
	if trust != events.TrustOwnPermissions {
		for _, v := range ref.Effective.Values() {
			if v != events.AllowFalse {
				return appserver.TurnStartParams{}, verdict{hold: t.reason("permission gate: effective %s; a delivery without your terminal needs all three false, or the thread trusted with its own permissions (cbth thread trust --thread-id %s --own-permissions)",
					permString(ref.Effective), thread)}
			}
		}
		for _, v := range ref.Current.Values() {
			if v != events.AllowFalse {
				return appserver.TurnStartParams{}, verdict{hold: t.reason("permission gate: the thread's current permissions (%s) are wider than the session's startup cap (%s); delivering would rewrite them (cbth thread trust --thread-id %s --own-permissions delivers with them)",
					permString(ref.Current), permString(ref.Startup), thread)}
			}
		}
	}
	p, why := repeatOwn(ref.Thread)
	if why != "" {
		return p, verdict{park: t.reason("%s", why)}
	}
	return p, verdict{}
}

// errNotPrepared is send's proven reject when Prepare's reading is not
// the one the barrier names.
var errNotPrepared = errs.New(errs.ESTATE, "no fresh reading of the thread for this delivery")
