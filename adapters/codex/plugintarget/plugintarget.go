// Package plugintarget is the host-plugin `codex_app_server` delivery
// target: a plugin hands cbth a result for one of its Codex threads, and
// the daemon delivers it through turn/start on an app-server it owns,
// acquired for that delivery (delivery-owned mode, the default) or
// ensured by the plugin beforehand (explicit lease mode). The batch,
// attempt and accepted-turn observation model is the delivery core's,
// and the turn/start, reconcile and observation code is the CLI
// target's (adapters/codex/clitarget), run on this package's app-servers
// (Pool). spec/plugin-target.md describes the contract.
package plugintarget

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/clitarget"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
)

// The service capabilities a plugin reads in the handshake.
const (
	// CapExplicitLease: app_server.ensure, then delivery.enqueue with
	// target.app_server_lease_id (the explicit lease driver contract).
	CapExplicitLease = "delivery-driver-codex-app-server-v1"
	// CapDeliveryOwned: delivery.enqueue without a lease id and with
	// target.codex_binary; the daemon acquires the app-server.
	CapDeliveryOwned = "delivery-owned-codex-app-server-target-v1"
)

// Capabilities lists the service capabilities of this daemon.
var Capabilities = []string{CapExplicitLease, CapDeliveryOwned}

// Domain markers of the two lease scopes: a delivery-owned scope and an
// explicit (plugin-instance) scope can never name the same lease, and a
// delivery-owned one never depends on the transient plugin instance, so
// a restarted plugin finds the same target again.
const (
	scopeDeliveryOwned = "cbth/codex_app_server/delivery-owned/v1"
	scopePluginLease   = "cbth/codex_app_server/plugin-instance/v1"
)

func digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// DeliveryOwned derives the delivery-owned lease of a plugin's delivery:
// its lease id and managed session id come from the stable plugin
// identity, the thread and the idempotency key alone, at epoch 1.
func DeliveryOwned(pluginID, thread, idempotencyKey, codexBinary string) Lease {
	scope := digest(scopeDeliveryOwned, pluginID, thread, idempotencyKey)
	id := "dol-" + scope[:32]
	return Lease{ID: id, Scope: scopeDeliveryOwned + ":" + id, Ownership: command.OwnershipDeliveryOwned,
		PluginID: pluginID, Thread: thread, CodexBinary: codexBinary, ManagedSessionID: "dos-" + digest(scope, "managed_session")[:32], Epoch: 1}
}

// EnqueueKey is the job dedupe key of a plugin's idempotency key: a key
// is the plugin's own, for one thread.
func EnqueueKey(pluginID, thread, idempotencyKey string) string {
	return "plugin/" + digest("cbth/codex_app_server/enqueue/v1", pluginID, thread, idempotencyKey)[:40]
}

// PluginScope is the scope of an explicit lease: one per plugin instance
// and thread.
func PluginScope(pluginID, instanceID, thread string) string {
	return scopePluginLease + ":" + digest(scopePluginLease, pluginID, instanceID, thread)
}

// Target is the "codex_app_server" delivery target.
type Target struct {
	cfg   clitarget.Config
	pool  *Pool
	inner *clitarget.Target
	eng   *engine.Engine
	log   *slog.Logger

	host target.Host
}

// New returns the target on pool. cfg is the [cli] configuration (the
// same timeouts, windows and permission gate as the CLI target; steer is
// never used here). The CLI target's code gives its reasons under this
// target's name.
func New(cfg clitarget.Config, pool *Pool, eng *engine.Engine, now func() time.Time, log *slog.Logger) *Target {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Steer = false
	cfg.Label = command.TargetCodexAppServer
	t := &Target{cfg: cfg, pool: pool, eng: eng, log: log, inner: clitarget.New(cfg, pool, eng, now, log)}
	pool.OnLost(t.lost)
	return t
}

// Pool returns the target's app-servers.
func (t *Target) Pool() *Pool { return t.pool }

// Spec implements target.Target.
func (t *Target) Spec() target.Spec {
	return target.Spec{Name: string(command.TargetCodexAppServer), Kind: target.Push, RPCKind: command.RPCTurnStart,
		DeliveryMode: command.ModePluginStart, AcceptTimeout: t.cfg.AcceptTimeout, ObservationWindow: t.cfg.ObservationWindow}
}

// Start implements target.Starter.
func (t *Target) Start(ctx context.Context, h target.Host) error {
	t.host = h
	next := h.Sink
	h.Sink = sinkFunc(func(ctx context.Context, ev target.TurnEvent) (engine.Outcome, error) {
		out, err := next.Observe(ctx, ev)
		if err == nil {
			t.release(ev.AttemptID, ev.ManagedSessionID)
		}
		return out, err
	})
	return t.inner.Start(ctx, h)
}

type sinkFunc func(ctx context.Context, ev target.TurnEvent) (engine.Outcome, error)

func (f sinkFunc) Observe(ctx context.Context, ev target.TurnEvent) (engine.Outcome, error) {
	return f(ctx, ev)
}

// Recorded implements target.Acknowledger.
func (t *Target) Recorded(d command.Delivery, outcome engine.Outcome) {
	t.inner.Recorded(d, outcome)
	t.release(d.AttemptID, d.ManagedSessionID)
}

// release forgets a delivery-owned lease once its attempt no longer
// tracks a turn (closed, parked, or not accepted), so leases do not pile
// up with the jobs. Inspect acquires the target again from the persisted
// metadata when it needs it.
func (t *Target) release(attemptID, sessionID string) {
	tracking := false
	_ = t.eng.Read(func(v engine.Snapshot) error {
		if a, err := engine.Attempt(v, attemptID); a != nil && err == nil {
			tracking = a.Tracking()
		}
		return nil
	})
	if !tracking {
		t.pool.ReleaseSession(sessionID)
	}
}

// targetOf reads a batch's resolved target.
func (t *Target) targetOf(batchID string) (*events.DeliveryTarget, error) {
	var dt *events.DeliveryTarget
	err := t.eng.Read(func(v engine.Snapshot) error {
		b, err := engine.Batch(v, batchID)
		if err != nil {
			return err
		}
		if b != nil {
			dt = b.DeliveryTarget
		}
		return nil
	})
	return dt, err
}

// Gate implements target.Target. Nothing is acquired here: a
// delivery-owned target is acquired after the barrier (Deliver). An
// explicit lease must still be held (a restarted daemon forgot it: the
// plugin ensures it again); its current session and epoch are the route.
func (t *Target) Gate(_ context.Context, h target.Head) target.Gate {
	if t.cfg.Unavailable != nil {
		return target.Gate{Reason: "codex_app_server: codex cannot run: " + t.cfg.Unavailable.Error()}
	}
	dt, err := t.targetOf(h.BatchID)
	if err != nil {
		return target.Gate{Reason: "codex_app_server: read the batch's target: " + err.Error()}
	}
	if dt == nil {
		return target.Gate{Park: true, Reason: "codex_app_server: the batch has no resolved delivery target"}
	}
	route := command.Route{RPCKind: command.RPCTurnStart, DeliveryMode: command.ModePluginStart,
		ManagedSessionID: dt.ManagedSessionID, SessionEpoch: dt.SessionEpoch}
	if dt.Ownership == command.OwnershipExplicitLease {
		l, ok := t.pool.Lookup(dt.AppServerLeaseID)
		if !ok {
			return target.Gate{Reason: fmt.Sprintf("codex_app_server: app-server lease %s is not held (the plugin calls app_server.ensure again)", dt.AppServerLeaseID)}
		}
		route.ManagedSessionID, route.SessionEpoch = l.ManagedSessionID, l.Epoch
	}
	return target.Gate{OK: true, Route: route}
}

// Deliver implements target.Pusher. The barrier is durable and the batch
// is its thread's head: only now is the app-server started or refreshed
// and the thread read. A failure to acquire it is recorded as a proven
// reject that moves the batch to manual resolution (nothing was sent);
// a thread busy with a turn of its own is a plain proven reject, retried
// after the back-off. Then the CLI target's turn/start carries it out.
func (t *Target) Deliver(ctx context.Context, d command.Delivery) target.Result {
	failed := func(why string) target.Result {
		t.log.Warn("target acquisition failed", "thread", d.ThreadID, "attempt", d.AttemptID, "reason", why)
		return target.Result{Outcome: command.AcquisitionFailed, Reason: why}
	}
	dt, err := t.targetOf(d.BatchID)
	if err != nil || dt == nil {
		return failed(fmt.Sprintf("the batch's resolved target cannot be read (%v)", err))
	}
	var l Lease
	if dt.Ownership == command.OwnershipExplicitLease {
		held, ok := t.pool.Lookup(dt.AppServerLeaseID)
		if !ok {
			return failed("app-server lease " + dt.AppServerLeaseID + " is no longer held")
		}
		l, err = t.pool.Ensure(ctx, held)
	} else {
		l, err = t.pool.Ensure(ctx, LeaseOf(dt))
	}
	if err != nil {
		return failed(err.Error())
	}
	if l.ManagedSessionID != d.ManagedSessionID || l.Epoch != d.SessionEpoch {
		return target.Result{Outcome: command.RejectedBefore, Reason: fmt.Sprintf("app-server lease %s moved to epoch %d since the barrier", l.ID, l.Epoch)}
	}
	h := target.Head{ThreadID: d.ThreadID, BatchID: d.BatchID, Generation: d.Generation, Policy: d.Policy, RequiresArtifactRead: d.RequiresArtifact}
	g := t.inner.Prepare(ctx, h, target.Gate{OK: true, Route: command.Route{RPCKind: d.RPCKind, DeliveryMode: d.DeliveryMode,
		ManagedSessionID: d.ManagedSessionID, SessionEpoch: d.SessionEpoch}})
	if !g.OK {
		// Prepare holds a head back without Park or Retry only while a
		// turn of the thread's own runs; every other refusal (the
		// thread cannot be read, the permission gate) is a failure to
		// acquire the target.
		if !g.Park && g.Retry.IsZero() {
			return target.Result{Outcome: command.RejectedBefore, Reason: g.Reason}
		}
		return failed(g.Reason)
	}
	return g.Send(ctx, d)
}

// lost is told when an app-server instance ended with leases bound to
// it: an accepted turn observed on it has lost its event stream, so its
// attempt is abandoned and its batch parked, never resent.
func (t *Target) lost(instance string, leases []Lease) {
	for _, l := range leases {
		res, err := t.eng.Execute(context.Background(), engine.Meta{Actor: events.ActorAdapter, CorrelationID: "app-server-lost:" + instance},
			command.LoseStream{ManagedSessionID: l.ManagedSessionID, SessionEpoch: l.Epoch,
				Reason: "the daemon-owned codex app-server of lease " + l.ID + " exited: the accepted turn's event stream is gone"})
		if err != nil {
			t.log.Error("park after app-server exit", "lease", l.ID, "err", err)
			continue
		}
		if len(res.Events) > 0 && t.host.Wake != nil {
			t.host.Wake()
		}
	}
}

// TurnStatus looks the turn of a thread up on a lease's app-server (the
// thread resumed first, since a fresh instance has not loaded it): its
// status as Codex reports it, "" when the thread has no such turn.
func (t *Target) TurnStatus(ctx context.Context, l Lease, turnID string) (string, error) {
	c, err := t.pool.Client(l.Instance)
	if err != nil {
		return "", err
	}
	if _, err := c.ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: l.Thread, ExcludeTurns: true}); err != nil {
		return "", err
	}
	r, err := c.TurnsList(ctx, appserver.TurnsListParams{ThreadID: l.Thread, Limit: 20, SortDirection: "desc", ItemsView: "notLoaded"})
	if err != nil {
		return "", err
	}
	for _, tu := range r.Data {
		if tu.ID == turnID {
			return tu.Status, nil
		}
	}
	return "", nil
}

// Follows reports whether the attempt's accepted turn is being observed
// on a running instance (the daemon has watched it since acceptance).
func (t *Target) Follows(attemptID string) bool { return t.inner.Follows(attemptID) }

// LookUp asks the app-server for the followed turn of attemptID and
// reports its end if it ended unseen (clitarget's reconnection lookup).
func (t *Target) LookUp(attemptID string) { t.inner.LookUp(attemptID) }

func statusNote(msg appserver.Message) (appserver.ThreadStatusChangedNote, bool) {
	var n appserver.ThreadStatusChangedNote
	return n, json.Unmarshal(msg.Params, &n) == nil && n.ThreadID != ""
}

var (
	_ target.Pusher       = (*Target)(nil)
	_ target.Starter      = (*Target)(nil)
	_ target.Acknowledger = (*Target)(nil)
	_ clitarget.Sessions  = (*Pool)(nil)
)
