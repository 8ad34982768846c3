// Package pluginmod is the host-plugin codex_app_server target in the
// daemon (spec/plugin-target.md): the plugins' handshake, their
// app-server leases, and delivery.enqueue / delivery.inspect.
package pluginmod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/cbth-dev/cbth/adapters/codex/clitarget"
	"github.com/cbth-dev/cbth/adapters/codex/plugintarget"
	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/proc"
)

// appServerLog is the log of the target's app-servers, in the home's
// log directory.
const appServerLog = "codex-plugin-app-server.log"

// Module is the host-plugin codex_app_server target.
type Module struct {
	daemon.Base
	h *daemon.Host
	// plugin is the target and its daemon-owned app-servers; nil when
	// Options.Targets put another codex_app_server target in.
	plugin *plugintarget.Target
	// inst holds the plugin instances that made the handshake.
	inst pluginInstances
}

// New returns the host-plugin target's module.
func New() *Module { return &Module{} }

// Name names the module.
func (m *Module) Name() string { return "plugin" }

// Start sets up the target, unless Options.Targets put another one in.
// Its app-servers run with the daemon's Codex home and start only when a
// delivery or an ensure needs one.
func (m *Module) Start(_ context.Context, h *daemon.Host) error {
	m.h = h
	h.RotateLog(appServerLog)
	if h.Replaced(string(command.TargetCodexAppServer)) {
		return nil
	}
	c := h.Config
	codexHome, err := c.CodexHomeDir(os.Getenv)
	pool := plugintarget.NewPool(plugintarget.PoolConfig{CodexHome: codexHome, RunDir: filepath.Join(h.Home.RunDir(), "plugin"),
		LogPath: filepath.Join(h.Home.LogDir(), appServerLog), Env: c.ChildEnv(os.LookupEnv), Version: h.Version,
		Clock: h.Clock, Log: h.Log.With("component", "codex-plugin")})
	// plugintarget.New turns steer off whatever [cli] says.
	m.plugin = plugintarget.New(clitarget.ConfigOf(c, err), pool, h.Eng, h.Clock.Now, h.Log.With("target", command.TargetCodexAppServer))
	return nil
}

// Targets is the codex_app_server delivery target.
func (m *Module) Targets() []target.Target {
	if m.plugin == nil {
		return nil
	}
	return []target.Target{m.plugin}
}

// Stop stops the target's app-servers.
func (m *Module) Stop(ctx context.Context) error {
	if m.plugin == nil {
		return nil
	}
	if err := m.plugin.Pool().Stop(ctx); err != nil {
		m.h.Log.Error("stop the plugin codex app-servers", "err", err)
	}
	return nil
}

func leaseView(l plugintarget.Lease) api.Lease {
	return api.Lease{AppServerLeaseID: l.ID, Ownership: l.Ownership, PluginID: l.PluginID, BoundThreadID: l.Thread,
		CodexBinary: l.CodexBinary, ManagedSessionID: l.ManagedSessionID, SessionEpoch: l.Epoch, AppServerInstance: l.Instance, AppServerPID: l.PID}
}

func checkNamed(what, v string) error {
	if strings.TrimSpace(v) == "" {
		return errs.New(errs.EINVAL, "%s is required", what)
	}
	if len(v) > 256 || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return errs.New(errs.EINVAL, "%s is longer than 256 bytes or holds a control character", what)
	}
	return nil
}

// checkCodexBinary refuses a relative path: the daemon's working
// directory is not the caller's (a name looked up in PATH is fine); and
// an executable another user could rewrite, at once when it exists
// (whatever it names is checked again when it is started).
func checkCodexBinary(b string) error {
	if err := checkNamed("codex_binary", b); err != nil {
		return err
	}
	if strings.ContainsRune(b, '/') && !filepath.IsAbs(b) {
		return errs.New(errs.EINVAL, "codex_binary %q is relative: give a name looked up in PATH or an absolute path", b)
	}
	if !filepath.IsAbs(b) {
		return nil
	}
	if err := home.CheckUnshared("codex_binary", b, true); errs.CodeOf(err) != errs.ENOENT {
		return err
	}
	return nil
}

// pluginInstances is the service boundary's record of the plugin
// instances that made the handshake: which plugin each belongs to and
// its process. It lives in the daemon's memory; a plugin makes the
// handshake again when it restarts, or when the daemon did.
type pluginInstances struct {
	mu sync.Mutex
	m  map[string]pluginInstance // plugin_instance_id -> instance
}

type pluginInstance struct {
	plugin string
	pid    int
	start  string // the kernel's start time of pid: the pair names the process
}

func (p *pluginInstances) register(plugin, instance string, pid int, start string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]pluginInstance{}
	}
	if cur, ok := p.m[instance]; ok {
		switch {
		case cur.plugin != plugin:
			return errs.New(errs.EACCES, "plugin instance %s belongs to another plugin", instance)
		case !proc.Alive(cur.pid, cur.start):
			// An ended instance stays ended: its restart is a new instance.
			return errs.New(errs.ESTALE, "plugin instance %s ended (pid %d is gone): a restarted plugin is a new instance, with a new id", instance, cur.pid)
		case cur.pid != pid || cur.start != start:
			return errs.New(errs.EACCES, "plugin instance %s is pid %d's, which still runs", instance, cur.pid)
		}
	}
	p.m[instance] = pluginInstance{plugin: plugin, pid: pid, start: start}
	return nil
}

// pluginProcess checks the pid a handshake declares and returns its
// start time: it must be the connection's peer, as the kernel recorded
// it, or one of the peer's ancestors (the plugin runs cbth plugin
// handshake as its child), and a process of this user other than init.
// So a plugin cannot name another's process, nor one that would never
// end.
func pluginProcess(peer, pid int) (string, error) {
	if pid <= 1 {
		return "", errs.New(errs.EINVAL, "plugin_pid %d: an instance needs its plugin's process id (the client itself or one of its ancestors)", pid)
	}
	found := false
	for p, n := peer, 0; p > 1 && n < 128; n++ {
		if p == pid {
			found = true
			break
		}
		in, ok, err := proc.Parent(p)
		if err != nil || !ok {
			break
		}
		p = in.PPID
	}
	if !found {
		return "", errs.New(errs.EACCES, "plugin_pid %d is neither this client (pid %d) nor one of its ancestors", pid, peer)
	}
	in, ok, err := proc.Parent(pid)
	start, sok, serr := proc.Start(pid)
	switch {
	case err != nil || serr != nil:
		return "", errs.Wrap(errs.EINTERNAL, errors.Join(err, serr), "read process %d", pid)
	case !ok || !sok:
		return "", errs.New(errs.ESTALE, "plugin_pid %d has ended", pid)
	case in.UID != os.Getuid():
		return "", errs.New(errs.EACCES, "plugin_pid %d is another user's process (uid %d)", pid, in.UID)
	}
	return start, nil
}

// check validates a request of a plugin instance: it made the handshake
// as this plugin, and the process it named then still runs.
func (p *pluginInstances) check(plugin, instance string) error {
	p.mu.Lock()
	cur, ok := p.m[instance]
	p.mu.Unlock()
	switch {
	case !ok:
		return errs.New(errs.ESTATE, "plugin instance %s made no handshake with this daemon (cbth plugin handshake first)", instance)
	case cur.plugin != plugin:
		return errs.New(errs.EACCES, "plugin instance %s belongs to another plugin", instance)
	case !proc.Alive(cur.pid, cur.start):
		return errs.New(errs.ESTALE, "plugin instance %s ended (pid %d is gone): handshake again as the new instance", instance, cur.pid)
	}
	return nil
}

// Ops registers the plugin operations.
func (m *Module) Ops(t api.Table) {
	api.Handle(t, api.PluginHandshake, func(ctx context.Context, a api.HandshakeArgs) (api.HandshakeReply, error) {
		if err := checkNamed("plugin_id", a.PluginID); err != nil {
			return api.HandshakeReply{}, err
		}
		if a.PluginPID < 0 {
			return api.HandshakeReply{}, errs.New(errs.EINVAL, "plugin_pid %d", a.PluginPID)
		}
		if a.PluginInstanceID != "" {
			if err := checkNamed("plugin_instance_id", a.PluginInstanceID); err != nil {
				return api.HandshakeReply{}, err
			}
			peer := -1
			if c := ipc.ConnOf(ctx); c != nil {
				peer = c.PeerPID
			}
			start, err := pluginProcess(peer, a.PluginPID)
			if err != nil {
				return api.HandshakeReply{}, err
			}
			if err := m.inst.register(a.PluginID, a.PluginInstanceID, a.PluginPID, start); err != nil {
				return api.HandshakeReply{}, err
			}
		}
		return api.HandshakeReply{PluginID: a.PluginID, ServiceCapabilities: slices.Clone(plugintarget.Capabilities),
			Version: m.h.Version, Protocol: ipc.Proto, PID: os.Getpid()}, nil
	})
	api.Handle(t, api.AppServerEnsure, withPlugin(m, m.ensureLease))
	api.Handle(t, api.DeliveryEnqueue, withPlugin(m, m.enqueue))
	api.Handle(t, api.DeliveryInspect, withPlugin(m, m.inspectDelivery))
}

// withPlugin refuses an operation of the host-plugin target when another
// codex_app_server target replaced it (Options.Targets).
func withPlugin[Req, Rep any](m *Module, f func(context.Context, Req) (Rep, error)) func(context.Context, Req) (Rep, error) {
	return func(ctx context.Context, r Req) (Rep, error) {
		if m.plugin == nil {
			var zero Rep
			return zero, errs.New(errs.ENOTSUP, "this daemon runs no host-plugin codex_app_server target")
		}
		return f(ctx, r)
	}
}

// ensureLease serves app_server.ensure: the explicit lease of a plugin
// instance's thread, made the first time and reused while held; its
// app-server is started, or restarted, on the way.
func (m *Module) ensureLease(ctx context.Context, a api.EnsureArgs) (api.EnsureReply, error) {
	for _, f := range []struct{ n, v string }{{"plugin_id", a.PluginID}, {"plugin_instance_id", a.PluginInstanceID},
		{"source_thread_id", a.SourceThreadID}} {
		if err := checkNamed(f.n, f.v); err != nil {
			return api.EnsureReply{}, err
		}
	}
	if err := checkCodexBinary(a.CodexBinary); err != nil {
		return api.EnsureReply{}, err
	}
	if err := m.inst.check(a.PluginID, a.PluginInstanceID); err != nil {
		return api.EnsureReply{}, err
	}
	pool := m.plugin.Pool()
	scope := plugintarget.PluginScope(a.PluginID, a.PluginInstanceID, a.SourceThreadID)
	outcome, l := api.EnsureReused, plugintarget.Lease{}
	if held, ok := pool.ByScope(scope); ok && held.CodexBinary == a.CodexBinary {
		l = held
	} else {
		outcome = api.EnsureStarted
		l = plugintarget.Lease{ID: "asl-" + uuid.NewString(), Scope: scope, Ownership: command.OwnershipExplicitLease,
			PluginID: a.PluginID, Thread: a.SourceThreadID, CodexBinary: a.CodexBinary, ManagedSessionID: "ams-" + uuid.NewString(), Epoch: 1}
	}
	l, err := pool.Ensure(ctx, l)
	if err != nil {
		return api.EnsureReply{}, err
	}
	defer m.h.Poke(ctx) // a batch waiting for its lease may go
	return api.EnsureReply{Outcome: outcome, Lease: leaseView(l)}, nil
}

// enqueue serves delivery.enqueue: it resolves the target (the held
// explicit lease, checked against the thread and the caller's
// assertions; or the delivery-owned lease derived from the plugin, the
// thread and the idempotency key) and submits the job with it. A refusal
// appends nothing. Nothing is started here: a delivery-owned app-server
// starts when the job's batch is delivered.
func (m *Module) enqueue(ctx context.Context, a api.EnqueueArgs) (api.EnqueueReply, error) {
	if err := checkNamed("plugin_id", a.PluginID); err != nil {
		return api.EnqueueReply{}, err
	}
	if err := checkNamed("source_thread_id", a.SourceThreadID); err != nil {
		return api.EnqueueReply{}, err
	}
	if a.PluginInstanceID != "" {
		if err := m.inst.check(a.PluginID, a.PluginInstanceID); err != nil {
			return api.EnqueueReply{}, err
		}
	}
	var dt *events.DeliveryTarget
	if id := a.Target.AppServerLeaseID; id != "" {
		l, ok := m.plugin.Pool().Lookup(id)
		if !ok {
			return api.EnqueueReply{}, errs.New(errs.ENOENT, "app-server lease %s is not held (app_server.ensure first)", id)
		}
		if l.Thread != a.SourceThreadID {
			return api.EnqueueReply{}, errs.New(errs.LeaseThreadMismatch, "app-server lease %s is bound to thread %s, not %s", id, l.Thread, a.SourceThreadID)
		}
		if l.PluginID != a.PluginID {
			return api.EnqueueReply{}, errs.New(errs.EACCES, "app-server lease %s belongs to another plugin", id)
		}
		if a.Target.CodexBinary != "" && a.Target.CodexBinary != l.CodexBinary {
			return api.EnqueueReply{}, errs.New(errs.EINVAL, "app-server lease %s runs %s, not %s", id, l.CodexBinary, a.Target.CodexBinary)
		}
		if (a.Target.ManagedSessionID != "" && a.Target.ManagedSessionID != l.ManagedSessionID) ||
			(a.Target.SessionEpoch != 0 && a.Target.SessionEpoch != l.Epoch) {
			return api.EnqueueReply{}, errs.New(errs.ESTALE, "app-server lease %s is managed session %s at epoch %d, not what the caller asserts",
				id, l.ManagedSessionID, l.Epoch)
		}
		dt = l.Target()
	} else {
		if err := checkCodexBinary(a.Target.CodexBinary); err != nil {
			return api.EnqueueReply{}, errs.Wrap(errs.CodeOf(err), err, "delivery-owned mode (no target.app_server_lease_id)")
		}
		if err := checkNamed("idempotency_key", a.IdempotencyKey); err != nil {
			return api.EnqueueReply{}, errs.Wrap(errs.EINVAL, err, "delivery-owned mode derives its target from it")
		}
		l := plugintarget.DeliveryOwned(a.PluginID, a.SourceThreadID, a.IdempotencyKey, a.Target.CodexBinary)
		if (a.Target.ManagedSessionID != "" && a.Target.ManagedSessionID != l.ManagedSessionID) ||
			(a.Target.SessionEpoch != 0 && a.Target.SessionEpoch != l.Epoch) {
			return api.EnqueueReply{}, errs.New(errs.ESTALE, "the delivery-owned target is managed session %s at epoch %d, not what the caller asserts",
				l.ManagedSessionID, l.Epoch)
		}
		dt = l.Target()
	}
	pol, err := command.NormalizePolicy(a.Policy, a.Metadata)
	if err != nil {
		return api.EnqueueReply{}, err
	}
	cmd := command.SubmitJob{Target: command.TargetCodexAppServer, ThreadID: a.SourceThreadID, TaskKind: a.TaskKind, Summary: a.TaskSummary,
		Metadata: a.Metadata, Policy: pol, Timeout: m.h.Config.JobTimeout.Duration, DeliveryTarget: dt}
	meta := engine.Meta{Actor: events.ActorCLI}
	if a.IdempotencyKey != "" {
		// A key is the plugin's own, for one thread.
		cmd.DedupeKey = plugintarget.EnqueueKey(a.PluginID, a.SourceThreadID, a.IdempotencyKey)
		meta.CommandID = "delivery.enqueue/" + cmd.DedupeKey
	}
	val, res, err := engine.Exec[string](ctx, m.h.Eng, meta, cmd)
	if err != nil {
		return api.EnqueueReply{}, err
	}
	id := val
	if res.Replayed && len(res.Events) > 0 {
		id = res.Events[0].Stream.ID
	}
	j, err := m.h.Job(id)
	if err != nil {
		return api.EnqueueReply{}, err
	}
	return api.EnqueueReply{SubmitReply: api.SubmitReply{JobID: id, State: j.State, AcceptedAt: j.CreatedAt,
		Deduplicated: res.Replayed || res.Outcome == command.OutcomeDeduplicated}, DeliveryTarget: j.DeliveryTarget}, nil
}

// inspectDelivery serves delivery.inspect: the job, its batch and its
// resolved target, reconciled. A delivery-owned target is found again
// from the persisted target alone (its app-server ensured again if
// needed); an explicit-lease target needs its lease id. An accepted turn
// still observed is looked up on its instance (an end missed meanwhile
// is reported); one whose instance is gone is parked; for a parked batch
// the turn's status is shown as evidence and nothing changes.
func (m *Module) inspectDelivery(ctx context.Context, a api.DeliveryInspectArgs) (api.DeliveryInspection, error) {
	var rep api.DeliveryInspection
	jobID, batchID := a.JobID, a.BatchID
	if jobID == "" && batchID == "" {
		return rep, errs.New(errs.EINVAL, "name a job or a batch")
	}
	if jobID == "" {
		in, err := m.h.Inspect(ctx, batchID)
		if err != nil {
			return rep, err
		}
		if len(in.Batch.JobIDs) == 0 {
			return rep, errs.New(errs.ENOENT, "batch %s has no jobs", batchID)
		}
		jobID = in.Batch.JobIDs[0]
	}
	j, err := m.h.Job(jobID)
	if err != nil {
		return rep, err
	}
	if j.TargetKind != command.TargetCodexAppServer || j.DeliveryTarget == nil {
		return rep, errs.New(errs.EINVAL, "job %s is not a codex_app_server delivery", jobID)
	}
	if batchID == "" && j.Batch != nil {
		batchID = j.Batch.BatchID
	}
	// The metadata (up to command.MaxMetadata) stays with job query, so
	// the reply is one batch inspection and a little more.
	j.Metadata = nil
	rep.Job, rep.DeliveryTarget = j, j.DeliveryTarget
	dt := j.DeliveryTarget
	pool := m.plugin.Pool()
	if dt.Ownership == command.OwnershipExplicitLease && a.AppServerLeaseID != "" && a.AppServerLeaseID != dt.AppServerLeaseID {
		return rep, errs.New(errs.EINVAL, "job %s is delivered through lease %s, not %s", jobID, dt.AppServerLeaseID, a.AppServerLeaseID)
	}
	if l, ok := pool.Lookup(dt.AppServerLeaseID); ok {
		v := leaseView(l)
		rep.Lease = &v
	}
	rep.Reconcile, err = m.reconcileTarget(ctx, dt, batchID, a.AppServerLeaseID != "")
	if err != nil {
		return rep, err
	}
	if batchID != "" {
		in, err := m.h.Inspect(ctx, batchID)
		if err != nil {
			return rep, err
		}
		rep.Batch = &in
	}
	if l, ok := pool.Lookup(dt.AppServerLeaseID); ok {
		v := leaseView(l)
		rep.Lease = &v
	}
	return rep, nil
}

func (m *Module) reconcileTarget(ctx context.Context, dt *events.DeliveryTarget, batchID string, leaseGiven bool) (api.Reconcile, error) {
	if batchID == "" {
		return api.Reconcile{Outcome: "not_needed", Detail: "the job is not ready: nothing was delivered"}, nil
	}
	var in query.BatchInspection
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		var err error
		in, err = query.Inspect(s, batchID)
		return err
	}); err != nil {
		return api.Reconcile{}, err
	}
	h := in.HeadAttempt
	if h == nil || h.TurnID == "" || in.Batch.State == fsm.BatchClosed {
		return api.Reconcile{Outcome: "not_needed", Detail: "no accepted turn of an open batch"}, nil
	}
	rc := api.Reconcile{TurnID: h.TurnID}
	if dt.Ownership == command.OwnershipExplicitLease && !leaseGiven {
		rc.Outcome, rc.Detail = "lease_required", "an explicit-lease target is reconciled only with its lease id (--lease-id)"
		return rc, nil
	}
	pool := m.plugin.Pool()
	tracking := in.Batch.ReplayPolicy == aggregate.ReplayAutomatic && h.ObservationState == "tracking"
	if tracking && m.plugin.Follows(h.AttemptID) {
		m.plugin.LookUp(h.AttemptID)
		rc.Outcome, rc.Detail = "followed", "the accepted turn is observed on the app-server instance that accepted it"
		return rc, nil
	}
	if tracking {
		// Nobody follows the turn on a running instance: the stream that
		// accepted it is gone.
		if _, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorAdapter, CorrelationID: "delivery.inspect:" + h.AttemptID},
			command.LoseStream{ManagedSessionID: h.ManagedSessionID, SessionEpoch: h.SessionEpoch,
				Reason: "the app-server instance that accepted the turn is gone (delivery.inspect)"}); err != nil {
			return rc, err
		}
		m.h.Poke(ctx)
		rc.Outcome, rc.Detail = "continuity_lost", "the instance that accepted the turn is gone: parked for manual resolution"
		return rc, nil
	}
	var l plugintarget.Lease
	var err error
	if dt.Ownership == command.OwnershipDeliveryOwned {
		// The same active target, found again from what was persisted.
		l, err = pool.Ensure(ctx, plugintarget.LeaseOf(dt))
	} else if held, ok := pool.Lookup(dt.AppServerLeaseID); ok {
		l, err = pool.Ensure(ctx, held)
	} else {
		rc.Outcome, rc.Detail = "lease_required", "lease "+dt.AppServerLeaseID+" is not held: app_server.ensure again"
		return rc, nil
	}
	rc.Outcome = "evidence"
	if err != nil {
		rc.Detail = "the target could not be acquired: " + err.Error()
		return rc, nil
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := m.plugin.TurnStatus(lctx, l, h.TurnID)
	switch {
	case err != nil:
		rc.Detail = "the turn could not be looked up: " + err.Error()
	case st == "":
		rc.Detail = "the thread has no such turn among its latest"
	default:
		rc.TurnStatus = st
		rc.Detail = "operator evidence only: the batch waits for manual resolution (cbth batch close-head)"
	}
	return rc, nil
}
