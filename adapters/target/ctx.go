package target

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// AgentSessions is an agent's sessions as the ctx target drives them (the
// agent socket's server).
type AgentSessions interface {
	// Trust is what the gate holds a batch's policy against: the agent's
	// tools that act (shell.exec, fs.write) and whether its .d/delivery
	// says trusted_all.
	Trust() (acting []string, trustedAll bool)
	Busy(session string) bool
	Deliver(ctx context.Context, session, msgID, input string) (runID string, done <-chan struct{}, status func() string, replayed bool, err error)
}

// CtxTarget delivers a batch into a CortexFS agent session as a new turn:
// the thread id is agent/<name>/<session> (a private session of the
// daemon's user). The turn is the batch's summary as a user message; the
// agent then runs on it as on any send. Accepted means the message is in
// the session's log; the turn completes when the agent's run ends ok.
type CtxTarget struct {
	// Agents finds an agent's sessions by name.
	Agents func(name string) (AgentSessions, error)
	// Turns reads, from the log, what became of the turn a delivery's
	// message id started in a thread's session (Reconcile).
	Turns func(ctx context.Context, thread, msgID string) (CtxTurn, error)

	mu   sync.Mutex
	sink Sink
}

// CtxSessionEpoch is the epoch of every ctx route: an agent session has
// no epochs (its runs belong to the session, whatever the daemon).
const CtxSessionEpoch = 1

// ParseCtxThread splits agent/<name>/<session>.
func ParseCtxThread(thread string) (agent, session string, err error) {
	parts := strings.Split(thread, "/")
	if len(parts) != 3 || parts[0] != "agent" {
		return "", "", errs.New(errs.EINVAL, "ctx thread %q is not agent/<name>/<session>", thread)
	}
	for _, c := range parts[1:] {
		if err := name.Valid(c); err != nil {
			return "", "", errs.Wrap(errs.EINVAL, err, "ctx thread %q", thread)
		}
	}
	return parts[1], parts[2], nil
}

// Spec implements Target.
func (t *CtxTarget) Spec() Spec {
	return Spec{Name: string(command.TargetCtx), Kind: Push, RPCKind: command.CtxTurn, DeliveryMode: command.CtxTurn}
}

// Start implements Starter.
func (t *CtxTarget) Start(_ context.Context, h Host) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sink = h.Sink
	return nil
}

// Gate implements Target: a thread that can never be an agent session is
// parked; an agent not served (yet) or a session running a turn waits.
func (t *CtxTarget) Gate(_ context.Context, h Head) Gate {
	agent, sess, err := ParseCtxThread(h.ThreadID)
	if err != nil {
		return Gate{Park: true, Reason: "ctx: " + err.Error()}
	}
	if h.RequiresArtifactRead {
		return Gate{Park: true, Reason: "ctx: an agent turn carries the summary only; this batch needs its artifact read"}
	}
	a, err := t.Agents(agent)
	if err != nil {
		return Gate{Reason: "ctx: " + err.Error()}
	}
	if why := Covers(agent, a, h.Policy); why != "" {
		return Gate{Park: true, Reason: why}
	}
	if a.Busy(sess) {
		return Gate{Reason: "ctx: the session is running a turn"}
	}
	return Gate{OK: true, Route: command.Route{RPCKind: command.CtxTurn, DeliveryMode: command.CtxTurn,
		ManagedSessionID: "ctx:" + h.ThreadID, SessionEpoch: CtxSessionEpoch}}
}

// Covers says why agent may not take a batch of policy p ("" when it
// may). A result becomes the agent's next turn, and the agent acts on
// its turns with its tools: an agent that can act (shell.exec, fs.write)
// takes only results that are read-only and need no approval, network
// or write access, unless its .d/delivery says trusted_all. An agent
// that can only read takes any result: nothing in it can make the agent
// do more than read.
func Covers(agent string, a AgentSessions, p events.DeliveryPolicy) string {
	acting, trusted := a.Trust()
	if trusted || len(acting) == 0 || (p.ReadOnly && !p.RequiresApproval && !p.RequiresNetwork && !p.RequiresWriteAccess) {
		return ""
	}
	return fmt.Sprintf("ctx: agent %s can act (%s), so it takes only read-only results that need no approval, network or write access; "+
		"this batch's policy is read_only=%t requires_approval=%t requires_network=%t requires_write_access=%t "+
		"(submit the job with that policy, or let the agent take any result: cbth agent add %s --trusted-all)",
		agent, strings.Join(acting, ", "), p.ReadOnly, p.RequiresApproval, p.RequiresNetwork, p.RequiresWriteAccess, agent)
}

// TurnText is the user message a delivery becomes.
func TurnText(d command.Delivery) string {
	return fmt.Sprintf("[cbth] background job result (batch %s, jobs %s):\n%s", d.BatchID, strings.Join(d.JobIDs, ", "), d.Summary)
}

// Deliver implements Pusher. The attempt's rpc request id is the turn's
// message id, so a repeated delivery of one attempt adds no second turn.
func (t *CtxTarget) Deliver(ctx context.Context, d command.Delivery) Result {
	agent, sess, err := ParseCtxThread(d.ThreadID)
	if err != nil {
		return Result{Outcome: command.RejectedBefore, Reason: err.Error()}
	}
	a, err := t.Agents(agent)
	if err != nil {
		return Result{Outcome: command.RejectedBefore, Reason: err.Error()}
	}
	runID, done, status, replayed, err := a.Deliver(ctx, sess, d.RPCRequestID, TurnText(d))
	switch errs.CodeOf(err) {
	case "":
	case errs.EAGAIN, errs.EINVAL, errs.ENOENT:
		// Refused before the turn was recorded.
		return Result{Outcome: command.RejectedBefore, Reason: err.Error()}
	default:
		return Result{Outcome: command.AcceptanceUnknown, Reason: err.Error()}
	}
	r := Result{Outcome: command.Accepted, TurnID: runID, Tracks: true, Turn: []string{"turn_started"}}
	if replayed {
		r.Turn = append(r.Turn, "turn_completed")
		return r
	}
	select {
	case <-done:
		r.Turn = append(r.Turn, turnEnd(status()))
	case <-ctx.Done():
		// The turn goes on; its end is reported when it comes.
		t.mu.Lock()
		sink := t.sink
		t.mu.Unlock()
		if sink != nil {
			go func() {
				<-done
				_, _ = sink.Observe(context.Background(), TurnEvent{AttemptID: d.AttemptID, TurnID: runID, Event: turnEnd(status()),
					ManagedSessionID: d.ManagedSessionID, SessionEpoch: d.SessionEpoch})
			}()
		}
	}
	return r
}

func turnEnd(status string) string {
	switch status {
	case stream.StatusOK:
		return "turn_completed"
	case stream.StatusCancelled, stream.StatusInterrupted:
		return "turn_interrupted"
	}
	return "turn_failed"
}

// CtxTurn is what an agent session's log says about a delivered turn.
type CtxTurn struct {
	// Found: the turn's user message is in the session's log.
	Found bool
	// RunID is the run the message started; Status its done frame's
	// status ("" when the log has no done frame for it).
	RunID, Status string
}

// Reconcile implements Reconciler. An agent session's turns are in the
// same log as the attempts, written by the daemon alone, so at start-up
// (the last daemon gone, no socket served yet) the log is the whole truth:
//
//   - accept_pending, message absent: the turn was never recorded and no
//     one can record it now: rejected before accept (retried after the
//     back-off);
//   - accept_pending, message present: accepted, with its run as the
//     turn, and the run's end as turn events;
//   - tracking a turn: the run's end as a turn event.
//
// A run without a done frame died with the last daemon (runs live in the
// daemon's process): turn_interrupted, so the batch is parked with that
// reason, fail-closed, since the run's tools may have acted. A run that
// ended ok closes the batch delivered. A thread or session the log cannot
// answer for is left unproven (parked by the core).
func (t *CtxTarget) Reconcile(ctx context.Context, open []InFlight) []Proof {
	if t.Turns == nil {
		return nil
	}
	var out []Proof
	for _, o := range open {
		if _, _, err := ParseCtxThread(o.ThreadID); err != nil {
			continue
		}
		turn, err := t.Turns(ctx, o.ThreadID, o.RPCRequestID)
		if err != nil {
			continue
		}
		p := Proof{AttemptID: o.AttemptID, RPCRequestID: o.RPCRequestID, ManagedSessionID: o.ManagedSessionID, SessionEpoch: o.SessionEpoch}
		switch {
		case o.State == fsm.AttemptAcceptPending && !turn.Found:
			p.Outcome, p.Reason = command.RejectedBefore, "the daemon stopped before the turn's message was recorded in the session"
		case o.State == fsm.AttemptAcceptPending:
			p.Outcome, p.TurnID, p.Tracks = command.Accepted, turn.RunID, true
			p.Turn = []string{"turn_started", runEnd(turn.Status)}
		case turn.Found && turn.RunID == o.TurnID:
			p.TurnID, p.Turn = o.TurnID, []string{runEnd(turn.Status)}
		default:
			continue
		}
		out = append(out, p)
	}
	return out
}

// runEnd is the turn event of a run's recorded end; no end at start-up
// means the run was cut off with the last daemon, as does the end a later
// start writes for it (stream.StatusInterrupted).
func runEnd(status string) string {
	if status == "" {
		return "turn_interrupted"
	}
	return turnEnd(status)
}
