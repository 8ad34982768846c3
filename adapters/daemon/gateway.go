package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strconv"

	"github.com/cbth-dev/cbth/adapters/gateway"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	gatewaycmd "github.com/cbth-dev/cbth/engine/command/gateway"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/sockfile"
)

// serveGateway listens on run/gateway.sock and serves the channel
// gateway until ctx ends (spec/channels.md).
func (d *Daemon) serveGateway(ctx context.Context) error {
	h := d.opt.Home
	ln, err := sockfile.Listen(h.GatewaySocket())
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "gateway socket")
	}
	d.gw = &gateway.Gateway{Eng: d.eng, CtxRoot: h.CtxRoot(), Agents: gateway.SocketAgents{}, Threads: gatewayThreads{d},
		Now: d.opt.Clock.Now, Log: d.opt.Log, UID: os.Getuid(), WriteTimeout: d.opt.Config.Gateway.WriteTimeout.Duration}
	go func() {
		if err := d.gw.Serve(ctx, ln); err != nil {
			d.opt.Log.Error("gateway", "err", err)
		}
	}()
	return nil
}

// gatewayThreads hands a routed message to the delivery core: a job
// submitted and completed at once, its result the message text, so the
// core delivers it into the thread by its rules (FIFO, batches,
// fail-closed policy). The job's dedupe key comes from the envelope's
// stream and seq: a re-route after a crash finds the same job.
type gatewayThreads struct{ d *Daemon }

func (t gatewayThreads) Deliver(ctx context.Context, g gateway.Delivery) (string, error) {
	d := t.d
	sum := sha256.Sum256([]byte(g.StreamID + "\x00" + strconv.FormatUint(g.Seq, 10)))
	key := "gateway-" + hex.EncodeToString(sum[:12])
	pol, err := command.NormalizePolicy(command.PolicyFlags{}, nil)
	if err != nil {
		return "", err
	}
	meta := engine.Meta{Actor: events.ActorAdapter, CorrelationID: g.CorrelationID, CommandID: "job.submit/" + key}
	val, res, err := engine.Exec[string](ctx, d.eng, meta, command.SubmitJob{Target: command.Target(g.TargetKind), ThreadID: g.ThreadID, TaskKind: "gateway.message",
		Summary: "dialog message " + key, DedupeKey: key, Policy: pol, Timeout: d.opt.Config.JobTimeout.Duration})
	if err != nil {
		return "", err
	}
	id := val
	if res.Replayed && len(res.Events) > 0 {
		id = res.Events[0].Stream.ID
	}
	j, err := d.job(id)
	if err != nil {
		return "", err
	}
	if j.State != fsm.JobRunning {
		return id, nil // completed before: a re-route
	}
	// The text is the job's result: the core keeps it in its artifact
	// store until the delivery is done, as it keeps every result.
	f, err := os.CreateTemp(d.opt.Home.TempDir(), "gateway-*")
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
	ing, err := d.artifacts.Ingest(f.Name(), id, d.opt.Clock.Now())
	if err != nil {
		return "", err
	}
	cres, err := d.eng.Execute(ctx, engine.Meta{Actor: events.ActorAdapter, CorrelationID: g.CorrelationID},
		command.CompleteJob{Config: d.deliveryConfig(), JobID: id, Summary: "dialog message for the thread", Artifact: &ing})
	if err != nil || cres.Outcome == command.OutcomeAlreadyCompleted {
		_ = d.artifacts.Remove(ing.ArtifactID)
	}
	if err != nil {
		return "", err
	}
	d.poke(ctx)
	return id, nil
}

func (d *Daemon) gatewayOps(t api.Table) {
	api.Handle(t, api.GatewayRouteAdd, func(ctx context.Context, a api.RouteArgs) (api.RouteReply, error) {
		res, err := d.eng.Execute(ctx, engine.Meta{Actor: events.ActorOperator, CorrelationID: "gateway-route"},
			gatewaycmd.AddRoute{WorkspaceID: a.WorkspaceID, AgentID: a.AgentID, To: a.To, Target: a.Target})
		if err != nil {
			return api.RouteReply{}, err
		}
		rep := api.RouteReply{Outcome: res.Outcome}
		err = d.eng.Read(func(s engine.Snapshot) error {
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
		_ = d.eng.Read(func(s engine.Snapshot) error { old, _ = query.GatewayRoute(s, a.WorkspaceID, a.AgentID); return nil })
		res, err := d.eng.Execute(ctx, engine.Meta{Actor: events.ActorOperator, CorrelationID: "gateway-route"},
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
		err = d.eng.Read(func(s engine.Snapshot) error { p, err = query.GatewayRoutes(s); return err })
		return p, err
	})
}
