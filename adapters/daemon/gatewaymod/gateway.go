// Package gatewaymod serves the channel gateway (spec/channels.md) in the
// daemon: run/gateway.sock, and the route operations.
package gatewaymod

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strconv"
	"strings"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/gateway"
	"github.com/cbth-dev/cbth/adapters/gateway/remote"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	gatewaycmd "github.com/cbth-dev/cbth/engine/command/gateway"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
	"github.com/cbth-dev/cbth/internal/sockfile"
)

// Module is the channel gateway.
type Module struct {
	daemon.Base
	h  *daemon.Host
	gw *gateway.Gateway
	// remotes are the links to other machines' gateways (ssh:NAME
	// routes).
	remotes *remote.Forwarder
}

// New returns the gateway module.
func New() *Module { return &Module{} }

// Name names the module.
func (m *Module) Name() string { return "gateway" }

// Start takes the host's services; the gateway serves once the daemon
// caught up (CatchUp).
func (m *Module) Start(_ context.Context, h *daemon.Host) error {
	m.h = h
	m.remotes = &remote.Forwarder{Remote: m.remote, Version: h.Version, Log: h.Log, Now: h.Clock.Now}
	return nil
}

// Stop ends the links to remote gateways: their ssh processes go with
// the daemon.
func (m *Module) Stop(context.Context) error {
	m.remotes.Stop()
	return nil
}

// remote reads [gateway.remotes.NAME] from config.toml as it is now.
func (m *Module) remote(name string) (home.GatewayRemote, error) {
	cfg, err := m.h.Home.LoadConfig(os.Getenv)
	if err != nil {
		return home.GatewayRemote{}, &remote.Fault{Code: errs.CodeOf(err), ReasonCode: remote.ReasonConfig, Message: "ssh:" + name + ": " + err.Error()}
	}
	r, ok := cfg.Gateway.Remotes[name]
	if !ok {
		return home.GatewayRemote{}, &remote.Fault{Code: errs.ENOENT, ReasonCode: remote.ReasonNoRemote,
			Message: "ssh:" + name + ": no [gateway.remotes." + name + "] in " + m.h.Home.Config()}
	}
	return r, nil
}

// Ops registers the route operations.
func (m *Module) Ops(t api.Table) { m.gatewayOps(t) }

// CatchUp starts serving the gateway: last at start-up, so a routed
// message ingests its text only once the orphan artifacts are gone.
func (m *Module) CatchUp(ctx context.Context) error { return m.serveGateway(ctx) }

// Tick listens again when the gateway socket was removed: channel
// clients find the gateway by its path only.
func (m *Module) Tick(ctx context.Context) {
	if m.gw != nil {
		m.h.KeepSocket(ctx, m.h.Home.GatewaySocket(), m.gw.Serve)
	}
	m.remotes.Sweep()
}

// KeepAlive: connected channel clients keep the daemon up.
func (m *Module) KeepAlive() []string {
	if m.gw != nil {
		if n := m.gw.Conns(); n > 0 {
			return []string{plural.Count(n, "gateway client", "gateway clients")}
		}
	}
	return nil
}

// serveGateway listens on run/gateway.sock and serves the channel
// gateway until ctx ends (spec/channels.md).
func (m *Module) serveGateway(ctx context.Context) error {
	h := m.h.Home
	ln, err := sockfile.Listen(h.GatewaySocket())
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "gateway socket")
	}
	m.gw = &gateway.Gateway{Eng: m.h.Eng, CtxRoot: h.CtxRoot(), Agents: gateway.SocketAgents{}, Threads: gatewayThreads{m}, Remotes: m.remotes,
		Now: m.h.Clock.Now, Log: m.h.Log, UID: os.Getuid(), WriteTimeout: m.h.Config.Gateway.WriteTimeout.Duration}
	go func() {
		if err := m.gw.Serve(ctx, ln); err != nil {
			m.h.Log.Error("gateway", "err", err)
		}
	}()
	return nil
}

// gatewayThreads hands a routed message to the delivery core: a job
// submitted and completed at once, its result the message text, so the
// core delivers it into the thread by its rules (FIFO, batches,
// fail-closed policy). The job's dedupe key comes from the envelope's
// stream and seq: a re-route after a crash finds the same job.
type gatewayThreads struct{ m *Module }

func (t gatewayThreads) Deliver(ctx context.Context, g gateway.Delivery) (string, error) {
	m := t.m
	sum := sha256.Sum256([]byte(g.StreamID + "\x00" + strconv.FormatUint(g.Seq, 10)))
	key := "gateway-" + hex.EncodeToString(sum[:12])
	pol, err := command.NormalizePolicy(command.PolicyFlags{}, nil)
	if err != nil {
		return "", err
	}
	meta := engine.Meta{Actor: events.ActorAdapter, CorrelationID: g.CorrelationID, CommandID: "job.submit/" + key}
	j, _, err := m.h.Submitted(engine.Exec[string](ctx, m.h.Eng, meta, command.SubmitJob{Target: command.Target(g.TargetKind), ThreadID: g.ThreadID, TaskKind: "gateway.message",
		Summary: "dialog message " + key, DedupeKey: key, Policy: pol, Timeout: m.h.Config.JobTimeout.Duration}))
	if err != nil {
		return "", err
	}
	id := j.JobID
	if j.State != fsm.JobRunning {
		return id, nil // completed before: a re-route
	}
	// The text is the job's result: the core keeps it in its artifact
	// store until the delivery is done, as it keeps every result.
	f, err := os.CreateTemp(m.h.Home.TempDir(), "gateway-*")
	if err != nil {
		return "", errs.IO(err, "gateway message file")
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(g.Text); err != nil {
		f.Close()
		return "", errs.IO(err, "gateway message file")
	}
	if err := f.Close(); err != nil {
		return "", errs.IO(err, "gateway message file")
	}
	ing, err := m.h.Artifacts.Ingest(f.Name(), id, m.h.Clock.Now())
	if err != nil {
		return "", err
	}
	cres, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorAdapter, CorrelationID: g.CorrelationID},
		command.CompleteJob{Config: m.h.DeliveryConfig(), JobID: id, Summary: "dialog message for the thread", Artifact: &ing})
	if err != nil || cres.Outcome == command.OutcomeAlreadyCompleted {
		_ = m.h.Artifacts.Remove(ing.ArtifactID)
	}
	if err != nil {
		return "", err
	}
	m.h.Poke(ctx)
	return id, nil
}

func (m *Module) gatewayOps(t api.Table) {
	api.Handle(t, api.GatewayRouteAdd, func(ctx context.Context, a api.RouteArgs) (api.RouteReply, error) {
		if name, ok := strings.CutPrefix(a.To, gatewaycmd.RouteSSHPrefix); ok && gatewaycmd.CheckRoute(a.To, a.Target) == nil {
			// A route to a remote no table describes would fail every
			// envelope: say so now.
			if _, err := m.remote(name); err != nil {
				return api.RouteReply{}, err
			}
		}
		res, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorOperator, CorrelationID: "gateway-route"},
			gatewaycmd.AddRoute{WorkspaceID: a.WorkspaceID, AgentID: a.AgentID, To: a.To, Target: a.Target})
		if err != nil {
			return api.RouteReply{}, err
		}
		rep := api.RouteReply{Outcome: res.Outcome}
		err = m.h.Eng.Read(func(s engine.Snapshot) error {
			v, err := query.GatewayRoute(s, a.WorkspaceID, a.AgentID)
			if v != nil {
				rep.Route = *v
			}
			return err
		})
		return rep, err
	})
	api.Handle(t, api.GatewayRouteRemove, func(ctx context.Context, a api.RouteArgs) (api.RouteReply, error) {
		var old *query.RouteView
		_ = m.h.Eng.Read(func(s engine.Snapshot) error { old, _ = query.GatewayRoute(s, a.WorkspaceID, a.AgentID); return nil })
		res, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorOperator, CorrelationID: "gateway-route"},
			gatewaycmd.RemoveRoute{WorkspaceID: a.WorkspaceID, AgentID: a.AgentID})
		if err != nil {
			return api.RouteReply{}, err
		}
		rep := api.RouteReply{Outcome: res.Outcome}
		if old != nil {
			rep.Route = *old
		}
		return rep, nil
	})
	api.Handle(t, api.GatewayRouteList, func(_ context.Context, _ api.Empty) (p query.RoutePage, err error) {
		err = m.h.Eng.Read(func(s engine.Snapshot) error { p, err = query.GatewayRoutes(s); return err })
		return p, err
	})
}
