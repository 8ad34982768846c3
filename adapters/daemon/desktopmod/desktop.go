// Package desktopmod is Codex Desktop in the daemon (spec/desktop.md):
// the desktop pull target, the snapshot files it publishes, the
// bridge's and the callers' helpers, their MCP tools and the transcript
// relay.
package desktopmod

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"path/filepath"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/desktop"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	desktopcmd "github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections/inbox"
	"github.com/cbth-dev/cbth/projections/snapshot"
)

// Module is the daemon's Codex Desktop side: the pull target, the
// snapshot publisher, the fingerprints this cbth observes, the bridge's
// and the callers' helpers and the transcript relay.
type Module struct {
	daemon.Base
	h      *daemon.Host
	target *desktop.Target
	pub    *snapshot.Publisher
	fps    snapshot.Fingerprints

	pubMu   sync.Mutex // one publication at a time
	builder *snapshot.Builder

	relay relayState

	queue     *desktop.Queue
	queueScan queueScan
}

// New returns the Desktop module.
func New() *Module { return &Module{} }

// Name names the module.
func (m *Module) Name() string { return "desktop" }

// Start observes this cbth's validation fingerprints and sets up the
// desktop target and the snapshot publisher.
func (m *Module) Start(_ context.Context, h *daemon.Host) error {
	m.h = h
	fps, err := desktop.ObserveFingerprints(h.Version)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "observe the Desktop validation fingerprint")
	}
	c := h.Config.Desktop
	m.fps = fps
	m.builder = &snapshot.Builder{Config: h.DeliveryConfig(), Fingerprints: fps}
	m.queue = m.newQueue()
	m.target = &desktop.Target{Now: h.Clock.Now, Fingerprints: fps, Queue: m.queue,
		Read: func(fn func(engine.Snapshot) error) error { return h.Eng.Read(fn) }}
	m.pub = &snapshot.Publisher{Files: desktop.InboxFiles{Dir: h.Home.Inbox(), NoSync: h.NoSync}, Interval: c.SnapshotInterval.Duration,
		MaxAge: c.SnapshotMaxAge.Duration, Retention: c.SnapshotRetention.Duration,
		Log: h.Log.With("projection", "desktop"), Revisions: snapshotRevisions{m}}
	return nil
}

// Ops registers the Desktop operations: the operator's, the bridge's
// and the callers' helpers, the relay's and the MCP tools'.
func (m *Module) Ops(t api.Table) {
	m.desktopOps(t)
	m.desktopWritebackOps(t)
	m.relayOps(t)
	m.mcpDesktopOps(t)
}

// Targets is the desktop pull target.
func (m *Module) Targets() []target.Target { return []target.Target{m.target} }

// CatchUp writes the snapshot files again at start if they are missing
// or behind: they are a projection (the loop's first scheduling pass
// then prepares the heads that became ready).
func (m *Module) CatchUp(ctx context.Context) error {
	m.publishDesktop(ctx, true)
	return nil
}

// Scheduled publishes what a scheduling pass changed.
func (m *Module) Scheduled(ctx context.Context) { m.publishDesktop(ctx, false) }

// Tick publishes what changed (outside manual mode, where only requests
// act) and scans the relay's rollouts, and the rollout an open queue
// validation waits on, when a scan is due.
func (m *Module) Tick(ctx context.Context) {
	if !m.h.Manual {
		m.publishDesktop(ctx, false)
	}
	if time.Since(m.relay.lastScanned()) >= m.h.Config.Desktop.RelayScanInterval.Duration {
		m.scanRelay(ctx)
	}
	if m.queueScanDue() {
		m.scanQueue(ctx)
	}
}

// armConfig is what the Desktop writeback commands read of the
// configuration.
func (m *Module) armConfig() desktopcmd.ArmConfig {
	c := m.h.Config.Desktop
	return desktopcmd.ArmConfig{Delivery: m.h.DeliveryConfig(), Desktop: desktopcmd.DesktopConfig{ArmLease: c.ArmLease.Duration,
		PauseAfter: c.PauseNotBefore.Duration, PauseWindow: c.PauseWindow.Duration, RecoveryInlineBytes: c.RecoveryInlineBytes,
		RecoveryLease: c.RecoveryLease.Duration, MarkerTTL: c.RelayMarkerTTL.Duration}}
}

// snapshotRevisions keeps the Desktop snapshot revisions in the log, on
// the installation (spec/desktop.md, "Revisions").
type snapshotRevisions struct{ m *Module }

func (r snapshotRevisions) Reserved() (n uint64, err error) {
	err = r.m.h.Eng.Read(func(s engine.Snapshot) error {
		inst, err := command.Installation(s)
		if inst != nil {
			n = inst.SnapshotRevisionsReserved
		}
		return err
	})
	return n, err
}

func (r snapshotRevisions) Reserve(through uint64) error {
	_, err := r.m.h.Eng.Execute(context.Background(), engine.Meta{Actor: events.ActorDesktop, CorrelationID: "snapshot-revisions"},
		desktopcmd.ReserveSnapshotRevisions{Through: through})
	return err
}

// publishDesktop brings the Desktop snapshot files up to date with the
// log: at once when nothing changed since the last publication (the same
// log head, nothing fallen due, confirmed within snapshot_interval);
// otherwise it builds the content and publishes a new revision if it
// differs. confirm rewrites the manifest's published_at regardless.
func (m *Module) publishDesktop(ctx context.Context, confirm bool) (snapshot.Publication, error) {
	m.pubMu.Lock()
	defer m.pubMu.Unlock()
	now := m.h.Clock.Now()
	head := m.h.Eng.Head()
	if !confirm && m.pub.Current(head, now) {
		return snapshot.Publication{Outcome: "unchanged"}, nil
	}
	c, ok, err := m.buildDesktop(now)
	if err == nil && ok && m.issueSnapshotMarkers(ctx, c) > 0 {
		// The markers are in the log: build again so the revision
		// carries them.
		head = m.h.Eng.Head()
		c, ok, err = m.buildDesktop(now)
	}
	if err == nil && !ok {
		return snapshot.Publication{Outcome: snapshot.NothingToDo}, nil
	}
	var p snapshot.Publication
	if err == nil {
		p, err = m.pub.Publish(c, head, now, confirm)
	}
	if err != nil {
		m.h.Log.Error("publish the Desktop snapshot", "err", err)
		return p, err
	}
	if p.Outcome == snapshot.Published {
		m.h.Log.Info("desktop snapshot published", "revision", p.Manifest.SnapshotRevision, "bridge", c.Bridge,
			"ready", len(c.Ready), "arm_pending", len(c.ArmPending), "pause_due", len(c.PauseDue), "log_seq", head)
	}
	return p, nil
}

// issueSnapshotMarkers issues the relay markers the content lacks, so
// that a sandboxed bridge finds in the snapshot every marker whose line
// it may print (spec/desktop.md, "Markers in the snapshot"): an
// arm-pending marker per ready entry, an arm-accepted and a paused marker
// per arm-pending entry, a paused marker per pause-due entry. Only while
// a relay scanner is bound for the bridge: without one no line would
// ever be read. It returns how many it issued.
func (m *Module) issueSnapshotMarkers(ctx context.Context, c snapshot.Content) int {
	var bound bool
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		inst, err := command.Installation(s)
		if inst != nil {
			_, bound = inst.RelayScanners[c.Bridge]
		}
		return err
	}); err != nil || !bound {
		return 0
	}
	ttl := m.h.Config.Desktop.RelayMarkerTTL.Duration
	var items []desktopcmd.IssueRelayMarker
	add := func(kind, thread, attempt string, gen uint64, request string) error {
		mk, err := randomID("m1-", 20)
		if err == nil && request == "" {
			request, err = randomID("relay-", 8)
		}
		if err != nil {
			return err
		}
		items = append(items, desktopcmd.IssueRelayMarker{Kind: kind, BridgeThreadID: c.Bridge, Marker: mk, TTL: ttl,
			ArmToken: desktopcmd.ArmToken{ThreadID: thread, AttemptID: attempt, Generation: gen, BridgeRequestID: request}})
		return nil
	}
	var err error
	for _, e := range c.Ready {
		if e.RelayMarker == "" && err == nil {
			err = add(aggregate.RelayArmPending, e.SourceThreadID, e.AttemptID, e.Generation, "")
		}
	}
	for _, e := range c.ArmPending {
		if e.RelayMarker == "" && err == nil {
			err = add(aggregate.RelayArmAccepted, e.SourceThreadID, e.AttemptID, e.Generation, e.BridgeRequestID)
		}
		if e.RelayPausedMarker == "" && err == nil {
			err = add(aggregate.RelayPaused, e.SourceThreadID, e.AttemptID, e.Generation, e.BridgeRequestID)
		}
	}
	for _, e := range c.PauseDue {
		if e.RelayMarker == "" && err == nil {
			err = add(aggregate.RelayPaused, e.SourceThreadID, "", e.ArmedGeneration, "")
		}
	}
	if err != nil || len(items) == 0 {
		if err != nil {
			m.h.Log.Error("draw relay markers", "err", err)
		}
		return 0
	}
	n, _, err := engine.Exec[int](ctx, m.h.Eng, engine.Meta{Actor: events.ActorDesktop, CorrelationID: "snapshot-markers:" + c.Bridge},
		desktopcmd.IssueSnapshotMarkers{Items: items})
	if err != nil {
		m.h.Log.Error("issue the snapshot's relay markers", "err", err)
		return 0
	}
	return n
}

// randomID is prefix and n random bytes in hex.
func randomID(prefix string, n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", errs.Wrap(errs.EINTERNAL, err, "draw a random id")
	}
	return prefix + hex.EncodeToString(b), nil
}

// errMoved says the log moved between reading its new events and the
// snapshot: the changes do not reach the snapshot's checkpoint.
var errMoved = errors.New("the log moved")

// buildDesktop builds the publication content, reading again only the
// threads the events since the last build touched; when the log keeps
// moving under it, from scratch.
func (m *Module) buildDesktop(now time.Time) (c snapshot.Content, ok bool, err error) {
	b := m.builder
	for try := 0; try < 3 && b.Since() > 0; try++ {
		ch := &snapshot.Changes{Since: b.Since(), Upto: b.Since()}
		if err := m.h.Eng.ReadFrom(ch.Since+1, func(env events.Envelope) error {
			ch.Streams, ch.Upto = append(ch.Streams, env.Stream), env.Seq
			return nil
		}); err != nil {
			return c, false, err
		}
		err = m.h.Eng.Read(func(s engine.Snapshot) error {
			if s.Checkpoint() != ch.Upto {
				return errMoved
			}
			c, ok, err = b.Build(s, now, ch)
			return err
		})
		if !errors.Is(err, errMoved) {
			return c, ok, err
		}
	}
	err = m.h.Eng.Read(func(s engine.Snapshot) error {
		c, ok, err = b.Build(s, now, nil)
		return err
	})
	return c, ok, err
}

// installationView renders the installation state for a cbth observing
// fps (by transport; the daemon's own when nil).
func (m *Module) installationView(s engine.Reader, fps map[string]string) (query.InstallationView, error) {
	inst, err := command.Installation(s)
	if err != nil {
		return query.InstallationView{}, err
	}
	if fps == nil {
		fps = m.fps
	}
	transport := desktopcmd.TransportDirect
	if inst != nil {
		transport = inst.ReadTransport
	}
	observed := fps[transport]
	return query.NewInstallationView(inst, observed, filepath.Join(m.h.Home.Inbox(), inbox.ManifestName), m.queue.Command.CodexHome), nil
}

func (m *Module) desktopOps(t api.Table) {
	api.Handle(t, api.DesktopInstallation, func(_ context.Context, a api.InstallationArgs) (v query.InstallationView, err error) {
		err = m.h.Eng.Read(func(s engine.Snapshot) error { v, err = m.installationView(s, a.Fingerprints); return err })
		return v, err
	})
	api.Handle(t, api.DesktopInstallationRepair, m.repairInstallation)
	api.Handle(t, api.DesktopBindingRepair, m.repairBinding)
	api.Handle(t, api.DesktopBindingUnbind, m.unbind)
	api.Handle(t, api.DesktopBindingList, func(_ context.Context, a api.BindingListArgs) (p query.BindingPage, err error) {
		err = m.h.Eng.Read(func(s engine.Snapshot) error {
			p, err = query.Bindings(s, query.BindingFilter{State: fsm.BindingState(a.State), After: a.After, Limit: a.Limit})
			return err
		})
		return p, err
	})
	api.Handle(t, api.DesktopPreflight, m.preflight)
	api.Handle(t, api.DesktopQueueValidate, m.validateQueue)
	api.Handle(t, api.BatchSkipHead, func(ctx context.Context, a api.ThreadArgs) (api.SkipHeadReply, error) {
		val, res, err := engine.Exec[string](ctx, m.h.Eng, engine.Meta{Actor: events.ActorOperator, CorrelationID: "skip-head:" + a.SourceThreadID},
			command.SkipHead{ThreadID: a.SourceThreadID})
		if err != nil {
			return api.SkipHeadReply{}, err
		}
		m.h.Poke(ctx)
		id := val
		return api.SkipHeadReply{Outcome: res.Outcome, SourceThreadID: a.SourceThreadID, BatchID: id}, nil
	})
}

func (m *Module) repairInstallation(ctx context.Context, a api.InstallationRepairArgs) (api.InstallationRepairReply, error) {
	val, res, err := engine.Exec[desktopcmd.InstallationRepair](ctx, m.h.Eng, engine.Meta{Actor: events.ActorOperator, CorrelationID: "installation-repair"},
		desktopcmd.RepairInstallation{ReadTransport: a.ReadTransport, ReadCap: a.ReadTransportCapability,
			ArtifactCap: a.ArtifactReadCapability, WritebackCap: a.WritebackCapability, Fingerprint: a.Fingerprint})
	if err != nil {
		return api.InstallationRepairReply{}, err
	}
	m.h.Poke(ctx)
	rep := api.InstallationRepairReply{Outcome: res.Outcome, DegradedBindings: []string{}}
	if val.Degraded != nil {
		rep.DegradedBindings = val.Degraded
	}
	fps := map[string]string{a.ReadTransport: a.Fingerprint}
	err = m.h.Eng.Read(func(s engine.Snapshot) error { rep.InstallationView, err = m.installationView(s, fps); return err })
	return rep, err
}

func (m *Module) repairBinding(ctx context.Context, a api.BindingRepairArgs) (api.BindingRepairReply, error) {
	val, res, err := engine.Exec[desktopcmd.BindingRepair](ctx, m.h.Eng, engine.Meta{Actor: events.ActorOperator, CorrelationID: "binding-repair:" + a.SourceThreadID},
		desktopcmd.RepairBinding{ThreadID: a.SourceThreadID, AutomationID: a.CallerAutomationID, BridgeThreadID: a.BridgeThreadID})
	if err != nil {
		return api.BindingRepairReply{}, err
	}
	m.h.Poke(ctx)
	v := val
	rep := api.BindingRepairReply{Outcome: res.Outcome, ReplacedAutomation: v.ReplacedAutomation,
		PreviousAutomationID: v.PreviousAutomationID, OldAutomationQuiesced: v.OldQuiesced,
		ForcedFreshAttempt: v.ForcedFreshAttempt, SupersededAttemptID: v.SupersededAttemptID}
	rep.BindingView, err = m.bindingView(a.SourceThreadID)
	return rep, err
}

func (m *Module) unbind(ctx context.Context, a api.BindingUnbindArgs) (api.BindingUnbindReply, error) {
	res, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorOperator, CorrelationID: "binding-unbind:" + a.SourceThreadID},
		desktopcmd.UnbindBinding{ThreadID: a.SourceThreadID, DeleteAutomation: a.DeleteAutomation})
	if err != nil {
		return api.BindingUnbindReply{}, err
	}
	m.h.Poke(ctx)
	rep := api.BindingUnbindReply{Outcome: res.Outcome}
	rep.BindingView, err = m.bindingView(a.SourceThreadID)
	return rep, err
}

// bindingView renders a thread's binding (zero when it has none).
func (m *Module) bindingView(thread string) (v query.BindingView, err error) {
	err = m.h.Eng.Read(func(s engine.Snapshot) error {
		b, err := command.BindingOf(s, thread)
		if err != nil || b == nil {
			return err
		}
		inst, err := command.Installation(s)
		v = query.NewBindingView(b, inst)
		return err
	})
	return v, err
}

// preflight is bridge-preflight through the daemon: it selects the bridge
// thread, runs the overdue sweep (auto-close, artifact GC, the binding
// reconcile), prepares the eligible Desktop heads and publishes, then
// answers where the manifest is.
func (m *Module) preflight(ctx context.Context, a api.PreflightArgs) (api.PreflightReply, error) {
	res, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorBridge, CorrelationID: "preflight:" + a.BridgeThreadID},
		desktopcmd.SelectBridge{BridgeThreadID: a.BridgeThreadID})
	if err != nil {
		return api.PreflightReply{}, err
	}
	if res.Outcome == command.OutcomeSelected {
		m.h.Log.Info("desktop bridge thread selected", "bridge", a.BridgeThreadID)
	}
	m.scanRelay(ctx)
	if err := m.h.Sweep(ctx, "preflight"); err != nil {
		return api.PreflightReply{}, err
	}
	m.h.Schedule(ctx)
	p, err := m.publishDesktop(ctx, true)
	if err != nil {
		return api.PreflightReply{}, err
	}
	rep := api.PreflightReply{Source: "daemon", Outcome: string(p.Outcome), BridgeThreadID: a.BridgeThreadID,
		SnapshotManifestPath: p.ManifestPath, SnapshotRevision: p.Manifest.SnapshotRevision,
		PublishedAt: p.Manifest.PublishedAt, FreshUntil: p.Manifest.FreshUntil}
	err = m.h.Eng.Read(func(s engine.Snapshot) error {
		v, err := m.installationView(s, a.Fingerprints)
		rep.ReadTransport, rep.ReadTransportGeneration, rep.AutomaticContinuation = v.ReadTransport, v.ReadTransportGeneration, v.AutomaticContinuation
		return err
	})
	return rep, err
}

// desktopWritebackOps registers the bridge's and the caller's helpers.
func (m *Module) desktopWritebackOps(t api.Table) {
	api.Handle(t, api.DesktopNoteArmPending, func(ctx context.Context, a api.ArmArgs) (api.ArmPendingReply, error) {
		return m.noteArmPending(ctx, a, same)
	})
	api.Handle(t, api.DesktopNoteArm, func(ctx context.Context, a api.ArmArgs) (api.ArmReply, error) {
		return m.noteArm(ctx, a, same)
	})
	api.Handle(t, api.DesktopNotePaused, func(ctx context.Context, a api.PausedArgs) (api.PausedReply, error) {
		return m.notePaused(ctx, a, same)
	})
	api.Handle(t, api.DesktopNoteBoundaryCrossed, func(ctx context.Context, a api.BoundaryArgs) (api.BoundaryReply, error) {
		return m.crossBoundary(ctx, a, desktopcmd.WritebackDirect, same)
	})
}

// same leaves a command as it is; the MCP tools' wrap records their call
// in the same append (mcp.go).
func same(c engine.Decider) engine.Decider { return c }

func (m *Module) noteArmPending(ctx context.Context, a api.ArmArgs, wrap func(engine.Decider) engine.Decider) (api.ArmPendingReply, error) {
	val, res, err := engine.ExecVia[desktopcmd.ArmLease](ctx, m.h.Eng, engine.Meta{Actor: events.ActorBridge, CorrelationID: "bridge-request:" + a.BridgeRequestID},
		desktopcmd.NoteArmPending{Config: m.armConfig(), ArmToken: armToken(a), Fingerprints: m.fps}, wrap)
	if err != nil {
		return api.ArmPendingReply{}, err
	}
	m.h.Poke(ctx)
	return armPendingReply(res.Outcome, a, val), nil
}

func (m *Module) noteArm(ctx context.Context, a api.ArmArgs, wrap func(engine.Decider) engine.Decider) (api.ArmReply, error) {
	val, res, err := engine.ExecVia[desktopcmd.Armed](ctx, m.h.Eng, engine.Meta{Actor: events.ActorBridge, CorrelationID: "bridge-request:" + a.BridgeRequestID},
		desktopcmd.NoteArm{Config: m.armConfig(), ArmToken: armToken(a), LeaseID: a.BridgeArmLeaseID}, wrap)
	if err != nil {
		return api.ArmReply{}, err
	}
	m.h.Poke(ctx)
	return armReply(res.Outcome, a.SourceThreadID, val), nil
}

func (m *Module) notePaused(ctx context.Context, a api.PausedArgs, wrap func(engine.Decider) engine.Decider) (api.PausedReply, error) {
	res, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorBridge, CorrelationID: "bridge-request:" + a.BridgeRequestID},
		wrap(desktopcmd.NotePaused{ThreadID: a.SourceThreadID, Generation: a.Generation, BridgeRequestID: a.BridgeRequestID}))
	if err != nil {
		return api.PausedReply{}, err
	}
	m.h.Poke(ctx)
	return api.PausedReply{Outcome: res.Outcome, SourceThreadID: a.SourceThreadID, Generation: a.Generation}, nil
}

// crossBoundary is note-boundary-crossed through a writeback transport:
// the mcp one needs the mcp proof, the others writeback_capability.
func (m *Module) crossBoundary(ctx context.Context, a api.BoundaryArgs, transport string, wrap func(engine.Decider) engine.Decider) (api.BoundaryReply, error) {
	fps := a.Fingerprints
	if fps == nil {
		fps = m.fps
	}
	val, res, err := engine.ExecVia[desktopcmd.Handoff](ctx, m.h.Eng, engine.Meta{Actor: events.ActorCaller, CorrelationID: "boundary:" + a.BatchID},
		desktopcmd.NoteBoundaryCrossed{Config: m.armConfig(), ThreadID: a.SourceThreadID, BatchID: a.BatchID, AttemptID: a.AttemptID,
			Generation: a.Generation, ExpectedRevision: a.ExpectedSnapshotRevision, Fingerprints: fps, Transport: transport}, wrap)
	if err != nil {
		return api.BoundaryReply{}, err
	}
	m.h.Poke(ctx)
	h := val
	return api.BoundaryReply{Outcome: res.Outcome, SourceThreadID: h.SourceThreadID, BatchID: h.BatchID, AttemptID: h.AttemptID,
		Generation: h.Generation, SnapshotRevision: h.SnapshotRevision, ContinuationBoundaryState: "crossed_unacknowledged",
		ReplayPolicy: "manual_resolution_only", CloseReason: command.CloseHandoffRecorded,
		Continuation: api.Continuation{Summary: h.Summary, JobIDs: nonNil(h.JobIDs), ArtifactIDs: nonNil(h.ArtifactIDs)}}, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func armToken(a api.ArmArgs) desktopcmd.ArmToken {
	return desktopcmd.ArmToken{ThreadID: a.SourceThreadID, AttemptID: a.AttemptID, Generation: a.Generation, BridgeRequestID: a.BridgeRequestID}
}

func armPendingReply(outcome engine.Outcome, a api.ArmArgs, l desktopcmd.ArmLease) api.ArmPendingReply {
	return api.ArmPendingReply{Outcome: outcome, SourceThreadID: a.SourceThreadID, AttemptID: l.AttemptID, Generation: l.Generation,
		BridgeRequestID: a.BridgeRequestID, BridgeArmLeaseID: l.LeaseID, BridgeArmLeaseDeadline: l.LeaseDeadline,
		ArmPendingSince: l.PendingSince, ArmPendingDeadline: l.Deadline}
}

func armReply(outcome engine.Outcome, thread string, v desktopcmd.Armed) api.ArmReply {
	return api.ArmReply{Outcome: outcome, SourceThreadID: thread, AttemptID: v.AttemptID, Generation: v.Generation,
		ArmedGeneration: v.Generation, CooldownUntil: v.CooldownUntil, PauseNotBefore: v.PauseNotBefore,
		PauseDeadline: v.PauseDeadline, DeliveryAttemptCount: v.DeliveryAttemptCount}
}
