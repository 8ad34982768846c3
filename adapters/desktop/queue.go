package desktop

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/codexqueue"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine/command"
	desktopcmd "github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/internal/plural"
)

// Queue is the Desktop target's queue writeback transport
// (spec/desktop.md, "The queue transport"), experimental: with no
// heartbeat bridge, the daemon hands a bound thread's head to Codex's own
// queue for the thread in the Codex home Codex Desktop shares, and the
// batch closes handoff_recorded naming the queued item. Codex drains it
// as a turn with the thread's own permissions; cbth never edits the queue
// after.
type Queue struct {
	// Command runs `codex queue` with the user's codex and Codex home.
	Command codexqueue.Command
	// Unavailable, when set, is why this daemon cannot run Codex at all:
	// every head the queue would take waits with it.
	Unavailable error
	// HomeTrust is the home's trust, for threads the user gave none;
	// TrustOf reads a thread's own.
	HomeTrust string
	TrustOf   desktopcmd.TrustReader
	Log       *slog.Logger

	mu       sync.Mutex
	rollouts map[string]string // thread -> its rollout, once found
}

// retryRollout is how soon a head whose thread's rollout could not be
// read is looked at again: Codex writes a thread's rollout at its first
// turn, which nothing tells cbth about.
const retryRollout = 30 * time.Second

// route is the queue route of a head the queue gate let through: its
// barrier checks the gate again on the state the barrier is decided on.
func (q *Queue) route(batchID, observed string) command.Route {
	return command.Route{RPCKind: command.RPCQueueAdd, DeliveryMode: command.ModeDesktopQueue,
		Gate: desktopcmd.QueueBarrier{BatchID: batchID, Observed: observed, CodexHome: q.Command.CodexHome, HomeTrust: q.HomeTrust, TrustOf: q.TrustOf}}
}

// prepare reads the thread's rollout before its head goes to the queue:
// Codex must know the thread, and `codex exec` must not have started it
// (an exec resume merges queued items into its own turn and loses the
// rest: openai/codex#41060). It answers with the send.
func (q *Queue) prepare(h target.Head, g target.Gate, now time.Time) target.Gate {
	path, err := q.rollout(h.ThreadID)
	if err != nil {
		return target.Gate{Reason: "desktop: queue: " + err.Error(), Retry: now.Add(retryRollout)}
	}
	source, err := codexqueue.ThreadSource(path)
	if err != nil {
		q.forget(h.ThreadID)
		return target.Gate{Reason: "desktop: queue: " + err.Error(), Retry: now.Add(retryRollout)}
	}
	if source == codexqueue.SourceExec {
		return target.Gate{Reason: fmt.Sprintf("desktop: queue: codex exec started thread %s, and Codex's queue loses the items of such threads (openai/codex#41060): cbth never queues for it", h.ThreadID)}
	}
	g.Send = q.send
	return g
}

// rollout finds the thread's rollout once; a path that went away is
// looked for again.
func (q *Queue) rollout(thread string) (string, error) {
	q.mu.Lock()
	path, ok := q.rollouts[thread]
	q.mu.Unlock()
	if ok {
		return path, nil
	}
	path, err := codexqueue.FindRollout(q.Command.CodexHome, thread)
	if err != nil {
		return "", err
	}
	q.mu.Lock()
	if q.rollouts == nil {
		q.rollouts = map[string]string{}
	}
	q.rollouts[thread] = path
	q.mu.Unlock()
	return path, nil
}

func (q *Queue) forget(thread string) {
	q.mu.Lock()
	delete(q.rollouts, thread)
	q.mu.Unlock()
}

// send hands one delivery to Codex's queue for the thread. Exit 0 is the
// hand-off: the batch closes handoff_recorded, naming the item. A
// refusal (another exit, or codex not runnable) is proven, and retried;
// no end within the accept timeout is unknown, and the batch is parked,
// never queued again.
func (q *Queue) send(ctx context.Context, d command.Delivery) target.Result {
	r := q.Command.Add(ctx, d.ThreadID, Prompt(d))
	switch r.Outcome {
	case codexqueue.NotRun:
		return target.Result{Outcome: command.RejectedBefore, Reason: "codex queue not run: " + r.Detail}
	case codexqueue.Refused:
		return target.Result{Outcome: command.RejectedBefore, Reason: r.Detail}
	case codexqueue.Unknown:
		return target.Result{Outcome: command.AcceptanceUnknown, Reason: r.Detail}
	}
	q.Log.Info("handed to Codex's queue", "thread", d.ThreadID, "attempt", d.AttemptID, "queued_item_id", r.ItemID)
	return target.Result{Outcome: command.Accepted, Handoff: r.ItemID, CodexHome: q.Command.CodexHome}
}

// Prompt is the continuation a Desktop thread receives through the
// queue: the delivery's marker, the batch's summary, and the artifacts
// by id (a batch that needs an artifact read never takes this path).
func Prompt(d command.Delivery) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] cbth: background job results for this conversation (batch %s, %s).\n\n%s\n",
		d.Marker, d.BatchID, plural.Count(len(d.JobIDs), "job", "jobs"), d.Summary)
	if len(d.ArtifactIDs) > 0 {
		fmt.Fprintf(&b, "\nResult artifacts, not pasted here (cbth batch inspect --batch-id %s names them): %s\n", d.BatchID, strings.Join(d.ArtifactIDs, ", "))
	}
	return b.String()
}

// unavailable is the gate's reason while the queue cannot run here ("":
// it can).
func (q *Queue) unavailable() string {
	switch {
	case q == nil:
		return "desktop: the queue writeback transport is in use, and this daemon has no Codex to run it"
	case q.Unavailable != nil:
		return "desktop: the queue writeback transport is in use, and codex cannot run: " + q.Unavailable.Error()
	}
	return ""
}
