package clitarget

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/home"
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

// queued is what `codex queue` prints when it took the message.
var queued = regexp.MustCompile(`Queued message (\S+) for thread`)

// queueSend hands the delivery to Codex's own durable queue for the
// thread with `codex queue --thread T --message PROMPT` (no --resume:
// with no daemon the command writes the queue itself, and Codex drains
// it, in order, when the thread is next open). Exit 0 is accepted: the
// batch closes handoff_recorded, naming the item. A refusal (another
// exit) is proven, and retried; no end within the accept timeout is
// unknown.
func (t *Target) queueSend(ctx context.Context, d command.Delivery) target.Result {
	prompt, err := t.prompt(d)
	if err != nil {
		return target.Result{Outcome: command.RejectedBefore, Reason: "codex queue not run: " + err.Error()}
	}
	bin, err := home.LookCodex(t.cfg.Codex)
	if err != nil {
		return target.Result{Outcome: command.RejectedBefore, Reason: "codex queue not run: " + err.Error()}
	}
	codexHome := t.cfg.CodexDaemon.CodexHome()
	cmd := exec.CommandContext(ctx, bin, "queue", "--thread", d.ThreadID, "--message", prompt)
	cmd.Env = append(withoutCodexHome(t.cfg.CodexEnv), "CODEX_HOME="+codexHome)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	text := strings.TrimSpace(out.String())
	switch {
	case ctx.Err() != nil:
		return target.Result{Outcome: command.AcceptanceUnknown, Reason: fmt.Sprintf("codex queue did not end in time (%v): the item may be queued", ctx.Err())}
	case err != nil:
		return target.Result{Outcome: command.RejectedBefore, Reason: fmt.Sprintf("codex queue refused: %v: %s", err, firstLine(text))}
	}
	id := "(not printed)"
	if m := queued.FindStringSubmatch(text); m != nil {
		id = m[1]
	}
	t.log.Info("handed to Codex's queue", "thread", d.ThreadID, "attempt", d.AttemptID, "queued_item_id", id)
	return target.Result{Outcome: command.Accepted, Handoff: id, CodexHome: codexHome}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func withoutCodexHome(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CODEX_HOME=") {
			out = append(out, kv)
		}
	}
	return out
}
