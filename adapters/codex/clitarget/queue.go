package clitarget

import (
	"context"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/codexqueue"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/events"
)

// queueable says why a thread's result may not be handed to Codex's own
// queue ("" when it may): the hand-off is on ([cli] queue_handoff), the
// thread is trusted with its own permissions (a queued item runs as a
// turn with them, and carries none of its own), and the session was bound
// through the Codex daemon to a thread `codex exec` did not start (exec
// resumes merge queued items into one turn and lose the rest:
// openai/codex#41060), its source known.
func (t *Target) queueable(s *aggregate.Session, trust string) string {
	switch {
	case !t.cfg.QueueHandoff:
		return "[cli] queue_handoff is off"
	case trust != events.TrustOwnPermissions:
		return "the thread is not trusted with its own permissions"
	case s == nil || s.Mode != codex.ModeCodexDaemon || s.ThreadSource == "":
		return "where the thread came from is not known"
	case s.ThreadSource == appserver.SourceExec:
		return "codex exec started the thread"
	}
	return ""
}

// queueGate lets a head go to Codex's queue instead of a turn: the route
// names the session the thread was last read on (the hand-off is not
// observed) and the send runs `codex queue`.
func (t *Target) queueGate(h target.Head, s *aggregate.Session) target.Gate {
	return target.Gate{OK: true, Route: command.Route{RPCKind: command.RPCQueueAdd, DeliveryMode: command.ModeCLIQueue,
		ManagedSessionID: s.ID, SessionEpoch: s.Epoch},
		Send: func(ctx context.Context, d command.Delivery) target.Result { return t.queueSend(ctx, d) }}
}

// queueSend hands the delivery to Codex's own durable queue for the
// thread (codexqueue.Command.Add, shared with Desktop's queue transport).
// Exit 0 is accepted: the batch closes handoff_recorded, naming the item.
// A refusal (another exit, or codex not runnable) is proven, and
// retried; no end within the accept timeout is unknown.
func (t *Target) queueSend(ctx context.Context, d command.Delivery) target.Result {
	prompt, err := t.prompt(d)
	if err != nil {
		return target.Result{Outcome: command.RejectedBefore, Reason: "codex queue not run: " + err.Error()}
	}
	codexHome := t.cfg.CodexDaemon.CodexHome()
	r := codexqueue.Command{Codex: t.cfg.Codex, Env: t.cfg.CodexEnv, CodexHome: codexHome}.Add(ctx, d.ThreadID, prompt)
	switch r.Outcome {
	case codexqueue.NotRun:
		return target.Result{Outcome: command.RejectedBefore, Reason: "codex queue not run: " + r.Detail}
	case codexqueue.Refused:
		return target.Result{Outcome: command.RejectedBefore, Reason: r.Detail}
	case codexqueue.Unknown:
		return target.Result{Outcome: command.AcceptanceUnknown, Reason: r.Detail}
	}
	t.log.Info("handed to Codex's queue", "thread", d.ThreadID, "attempt", d.AttemptID, "queued_item_id", r.ItemID)
	return target.Result{Outcome: command.Accepted, Handoff: r.ItemID, CodexHome: codexHome}
}
