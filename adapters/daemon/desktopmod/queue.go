package desktopmod

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/codexqueue"
	"github.com/cbth-dev/cbth/adapters/desktop"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/codex"
	desktopcmd "github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The queue writeback transport (spec/desktop.md, "The queue
// transport"), experimental: its live validation, the scan that sees the
// validation's marker drained, and the Desktop target's queue side.

// queueValidationWindow is a live validation's window when the request
// gives none: Codex Desktop's own app-server sees a queue cbth added to
// only at its periodic check, and only for a thread it has open and idle.
const queueValidationWindow = 2 * time.Minute

// queueRunTimeout bounds one `codex queue` of a validation (it takes a
// fraction of a second: research codex-queue F3, F9).
const queueRunTimeout = 30 * time.Second

// queueScan follows the open validation's drain scan across ticks.
type queueScan struct {
	mu       sync.Mutex
	scan     *codexqueue.DrainScan
	lastScan time.Time
}

// newQueue is the Desktop target's queue side on this daemon's Codex:
// codex_binary, the Codex home and the environment the Codex CLI target
// runs Codex with.
func (m *Module) newQueue() *desktop.Queue {
	c := m.h.Config
	codexHome, err := c.CodexHomeDir(os.Getenv)
	return &desktop.Queue{Command: codexqueue.Command{Codex: c.CodexBinaryName(), Env: c.ChildEnv(os.LookupEnv), CodexHome: codexHome},
		Unavailable: err, HomeTrust: c.CLI.HomeTrust(), TrustOf: codex.TrustOf, Log: m.h.Log.With("target", "desktop", "transport", "queue")}
}

// ValidationMarkerPrompt is the item a live validation queues: a line the
// thread's model answers, carrying the marker the scan looks for.
func ValidationMarkerPrompt(marker string) string {
	return fmt.Sprintf("[%s] cbth is checking that Codex drains its queue for this thread (cbth desktop validate-queue). Reply with OK and do nothing else.", marker)
}

// validateQueue starts a live validation of the queue transport. Bad input
// (no installation, the thread not bound, a thread Codex does not know or
// that `codex exec` started, a window out of bounds) queues nothing and
// appends nothing. Otherwise a marker goes to Codex's queue for the
// thread: once Codex took it the validation is open and the scan watches
// the rollout; when `codex queue` failed, the failure is recorded (the
// transport is not validated) and answered with its class.
func (m *Module) validateQueue(ctx context.Context, a api.QueueValidateArgs) (api.QueueValidateReply, error) {
	window := time.Duration(a.WindowMS) * time.Millisecond
	if window == 0 {
		window = queueValidationWindow
	}
	if window < 0 || window > desktopcmd.MaxQueueValidationWindow {
		return api.QueueValidateReply{}, errs.New(errs.EINVAL, "the validation window must be positive and at most %s", desktopcmd.MaxQueueValidationWindow)
	}
	q, thread := m.queue, a.SourceThreadID
	if err := m.h.Eng.Read(func(s engine.Snapshot) error { return desktopcmd.CheckQueueValidation(s, thread) }); err != nil {
		return api.QueueValidateReply{}, err
	}
	if q.Unavailable != nil {
		return api.QueueValidateReply{}, errs.Wrap(errs.ENOTCONF, q.Unavailable, "the Codex home")
	}
	home := q.Command.CodexHome
	path, err := codexqueue.FindRollout(home, thread)
	if err != nil {
		return api.QueueValidateReply{}, err
	}
	source, err := codexqueue.ThreadSource(path)
	if err != nil {
		return api.QueueValidateReply{}, err
	}
	if source == codexqueue.SourceExec {
		return api.QueueValidateReply{}, errs.New(errs.EINVAL, "exec_thread: codex exec started thread %s, and Codex's queue loses the items of such threads (openai/codex#41060): cbth never queues for it; validate with a thread you opened in Codex", thread)
	}
	offset, err := codexqueue.Size(path)
	if err != nil {
		return api.QueueValidateReply{}, err
	}
	marker, err := randomID("cbthq-", 16)
	if err != nil {
		return api.QueueValidateReply{}, err
	}
	meta := engine.Meta{Actor: events.ActorOperator, CorrelationID: "validate-queue:" + thread}
	rctx, cancel := context.WithTimeout(ctx, queueRunTimeout)
	r := q.Command.Add(rctx, thread, ValidationMarkerPrompt(marker))
	cancel()
	if r.Outcome != codexqueue.Queued {
		fail := desktopcmd.FailQueueValidation{ThreadID: thread, CodexHome: home, Detail: r.Detail}
		var answer error
		switch r.Outcome {
		case codexqueue.NotRun:
			fail.Reason, answer = events.QueueNotRun, errs.New(errs.ENOTCONF, "%s: codex queue could not run: %s", events.QueueNotRun, r.Detail)
		case codexqueue.Refused:
			fail.Reason, answer = events.QueueRefused, errs.New(errs.TransientNotReady, "%s: nothing was queued: %s", events.QueueRefused, r.Detail)
		default:
			fail.Reason, fail.Marker = events.QueueUnknown, marker
			answer = errs.New(errs.UnknownAfterHelperFailure, "%s: %s; the marker %s may be queued, and the queue transport is not validated", events.QueueUnknown, r.Detail, marker)
		}
		if _, err := m.h.Eng.Execute(context.WithoutCancel(ctx), meta, fail); err != nil {
			return api.QueueValidateReply{}, err
		}
		return api.QueueValidateReply{}, answer
	}
	v, res, err := engine.Exec[events.InstallationQueueValidationStarted](context.WithoutCancel(ctx), m.h.Eng, meta, desktopcmd.StartQueueValidation{
		ThreadID: thread, Marker: marker, QueuedItemID: r.ItemID, CodexHome: home, RolloutPath: path, StartOffset: offset, Window: window})
	if err != nil {
		// Codex has the marker; with no validation open it proves nothing.
		m.h.Log.Warn("queue validation marker queued but not recorded", "thread", thread, "marker", marker, "queued_item_id", r.ItemID, "err", err)
		return api.QueueValidateReply{}, err
	}
	m.h.Log.Info("queue validation started", "thread", thread, "marker", marker, "queued_item_id", r.ItemID, "deadline", v.Deadline)
	return api.QueueValidateReply{Outcome: res.Outcome, SourceThreadID: thread, Marker: marker, QueuedItemID: r.ItemID,
		CodexHome: home, RolloutPath: path, Deadline: v.Deadline}, nil
}

// scanQueue reads the rollout of the thread the open validation waits on
// (from where it stood when the marker was queued) and records the proof
// once a turn of the queue carried the marker. What it cannot read it
// logs; the sweep fails the validation at its deadline all the same.
func (m *Module) scanQueue(ctx context.Context) {
	qs := &m.queueScan
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.lastScan = time.Now()
	var open *events.InstallationQueueValidationStarted
	var transport string
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		inst, err := command.Installation(s)
		if inst != nil {
			open, transport = inst.QueueValidation, inst.ReadTransport
		}
		return err
	}); err != nil || open == nil {
		qs.scan = nil
		return
	}
	if qs.scan == nil || qs.scan.Marker != open.Marker {
		qs.scan = &codexqueue.DrainScan{Path: open.RolloutPath, Marker: open.Marker, Offset: open.StartOffset}
	}
	drained, err := qs.scan.Scan()
	if err != nil {
		m.h.Log.Warn("read the rollout a queue validation waits on", "thread", open.ThreadID, "rollout", open.RolloutPath, "err", err)
		return
	}
	if !drained {
		return
	}
	_, res, err := engine.Exec[events.InstallationQueueWritebackValidated](ctx, m.h.Eng, engine.Meta{Actor: events.ActorDesktop, CorrelationID: "validate-queue:" + open.ThreadID},
		desktopcmd.ValidateQueueWriteback{Marker: open.Marker, Fingerprint: m.fps[transport]})
	if err != nil {
		m.h.Log.Warn("record the queue validation", "thread", open.ThreadID, "marker", open.Marker, "err", err)
		return
	}
	m.h.Log.Info("queue writeback transport validated", "thread", open.ThreadID, "marker", open.Marker, "outcome", res.Outcome)
	qs.scan = nil
	m.h.Poke(ctx)
}

// queueScanDue says whether a scan of the open validation is due.
func (m *Module) queueScanDue() bool {
	m.queueScan.mu.Lock()
	defer m.queueScan.mu.Unlock()
	return time.Since(m.queueScan.lastScan) >= m.h.Config.Desktop.QueueScanInterval.Duration
}
