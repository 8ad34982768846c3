// Package codexmod is the Codex CLI target in the daemon
// (spec/codex-cli.md): the shared app-server, the foregrounds of `cbth
// cli run` attached to it, their managed sessions, and the cli delivery
// target on them.
package codexmod

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cbth-dev/cbth/adapters/codex/clitarget"
	"github.com/cbth-dev/cbth/adapters/codex/mcpconfig"
	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/target"

	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// appServerLog is the shared app-server's log, in the home's log
// directory.
const appServerLog = "codex-app-server.log"

// Module is the Codex CLI target.
type Module struct {
	daemon.Base
	h *daemon.Host
	// shared is the daemon's shared app-server, started when a CLI
	// session first needs it; fgs the foregrounds attached to it.
	shared *sessions.Shared
	fgs    *foregrounds
	// daemon is the user's Codex daemon (the codex_daemon transport);
	// nil when [cli] codex_daemon is off or Codex cannot run.
	daemon   *sessions.Daemon
	codexErr error // a configuration that cannot run Codex
	target   target.Target
}

// New returns the Codex CLI module.
func New() *Module { return &Module{} }

// Name names the module.
func (m *Module) Name() string { return "codex" }

// Start sets up the Codex CLI adapter and the cli target on it, unless
// Options.Targets put another one in. It starts nothing.
func (m *Module) Start(_ context.Context, h *daemon.Host) error {
	m.h = h
	h.RotateLog(appServerLog)
	m.shared, m.codexErr = m.newShared()
	m.fgs = newForegrounds(m.shared, h.Eng, h.Log.With("component", "codex"))
	if m.codexErr == nil && h.Config.CLI.CodexDaemon {
		m.daemon = m.newDaemon()
	}
	if !h.Replaced(string(command.TargetCodexCLI)) {
		cfg := clitarget.ConfigOf(h.Config, m.codexErr)
		cfg.CodexEnv = h.Config.ChildEnv(os.LookupEnv)
		if m.daemon != nil {
			cfg.CodexDaemon = m.daemon
		}
		m.target = clitarget.New(cfg, m.shared, h.Eng, h.Clock.Now, h.Log.With("target", string(command.TargetCodexCLI)))
	}
	return nil
}

// Targets is the cli delivery target.
func (m *Module) Targets() []target.Target {
	if m.target == nil {
		return nil
	}
	return []target.Target{m.target}
}

// Stop stops the shared app-server.
func (m *Module) Stop(ctx context.Context) error {
	if m.shared == nil {
		return nil
	}
	if m.daemon != nil {
		m.daemon.Stop()
	}
	if err := m.shared.Stop(ctx); err != nil {
		m.h.Log.Error("stop the codex app-server", "err", err)
	}
	m.fgs.close()
	return nil
}

// Reconcile records what a daemon that has just started knows of the
// last one's Codex work, whatever the log says: no foreground is
// attached and no app-server it runs is up yet.
func (m *Module) Reconcile(ctx context.Context) error {
	if _, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorSweep, CorrelationID: "startup-sessions"}, codex.RecoverSessions{}); err != nil {
		return fmt.Errorf("recover sessions: %w", err)
	}
	return nil
}

// Swept settles the managed sessions: the sweep may have parked or
// closed a manual batch.
func (m *Module) Swept(ctx context.Context) { m.settleSessions(ctx) }

// Scheduled settles the managed sessions: a delivery may have parked a
// batch.
func (m *Module) Scheduled(ctx context.Context) { m.settleSessions(ctx) }

// settleSessions parks the managed sessions whose thread got a manual
// batch and unparks those whose manual batches closed. It reads first,
// so it costs the writer nothing when there is nothing to do.
func (m *Module) settleSessions(ctx context.Context) {
	var todo bool
	_ = m.h.Eng.Read(func(s engine.Snapshot) error {
		var err error
		todo, err = codex.SessionsUnsettled(s)
		return err
	})
	if !todo {
		return
	}
	if _, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorSweep, CorrelationID: "settle-sessions"}, codex.SettleSessions{}); err != nil {
		m.h.Log.Error("settle sessions", "err", err)
	}
}

// newShared sets up the shared app-server. It starts nothing: the shared
// app-server starts when a `cbth cli run` first needs it, so a home that
// never uses the CLI target never runs Codex. A configuration that cannot
// run Codex is kept as an error for the CLI operations to return, not a
// reason to refuse to start.
func (m *Module) newShared() (*sessions.Shared, error) {
	h, c := m.h.Home, m.h.Config
	codexHome, err := c.CodexHomeDir(os.Getenv)
	sm := sessions.NewShared(sessions.Config{
		Codex: c.CodexBinaryName(), CodexHome: codexHome, RunDir: filepath.Join(h.RunDir(), "codex"),
		Args:    mcpOverrides(h.Root, m.h.Log),
		TempDir: h.TempDir(), LogPath: filepath.Join(h.LogDir(), appServerLog), Env: c.ChildEnv(os.LookupEnv),
		Version: m.h.Version, Clock: m.h.Clock, Log: m.h.Log.With("component", "codex"), Steer: c.CLI.Steer,
	}, book{m.h.Eng})
	return sm, err
}

// newDaemon sets up the codex_daemon transport: the Codex daemon a plain
// `codex` runs for the same Codex home. It connects to nothing yet.
func (m *Module) newDaemon() *sessions.Daemon {
	h, c := m.h.Home, m.h.Config
	codexHome, _ := c.CodexHomeDir(os.Getenv) // checked by newShared
	return sessions.NewDaemon(sessions.DaemonConfig{CodexHome: codexHome, Codex: c.CodexBinaryName(), Env: c.ChildEnv(os.LookupEnv),
		TempDir: h.TempDir(), Version: m.h.Version, Home: h.Root, Clock: m.h.Clock, Log: m.h.Log.With("component", "codex-daemon"),
		Steer: c.CLI.Steer}, book{m.h.Eng})
}

// mcpOverrides make every session of the shared app-server load cbth's
// MCP server for this home (spec/mcp.md), whether or not the user ran
// `cbth mcp install`: the agent in a managed session can always hand its
// work back to cbth. They approve what an install approves by default,
// never an opt-in tool (task_run): that approval is the user's, made
// with `cbth mcp install --approve` in this Codex home's config.toml,
// whose keys these overrides leave as they are.
func mcpOverrides(root string, log *slog.Logger) []string {
	exe, err := os.Executable()
	if err != nil {
		log.Warn("the agent's MCP tools are off: this executable's path is unknown", "err", err)
		return nil
	}
	return mcpconfig.Entry{Command: exe, Home: root, Approve: mcpconfig.DefaultApproved()}.Overrides()
}

// Status reports codex_binary as this daemon resolves it, for doctor:
// the daemon's PATH is the one it started with, and only it decides
// whether cbth cli run finds Codex.
func (m *Module) Status(st *api.Status) {
	bin := m.h.Config.CodexBinaryName()
	look := &api.CodexLookup{Binary: bin}
	if p, err := home.LookCodex(bin); err != nil {
		look.Error = err.Error()
	} else {
		look.Path = p
	}
	st.Codex = look
	if m.daemon != nil {
		st.CodexDaemon = m.daemonStatus()
	}
}

// daemonStatus is the user's Codex daemon as this daemon follows it, or,
// when it follows none, what its socket says. It connects to nothing and
// records nothing: a status is a read.
func (m *Module) daemonStatus() *api.CodexDaemonStatus {
	ds := &api.CodexDaemonStatus{CodexHome: m.daemon.CodexHome(), Socket: m.daemon.Socket()}
	f, connected := m.daemon.Connected()
	var err error
	if !connected {
		if _, err = sessions.CheckDaemonSocket(ds.Socket, os.Getuid()); err == nil {
			ds.State = api.CodexDaemonFound // safe to use; connected on the first delivery
			return ds
		}
	}
	switch code := errs.CodeOf(err); {
	case err == nil:
		ds.State, ds.PID, ds.UserAgent, ds.Instance = api.CodexDaemonRunning, f.PID, f.UserAgent, f.Nonce
		if f.Probe != nil {
			ds.State, ds.Code, ds.Error = api.CodexDaemonRefused, string(errs.CodeOf(f.Probe)), f.Probe.Error()
		}
		ds.Deliveries = f.Probe == nil
	case code == errs.EHOSTDOWN:
		ds.State, ds.Code, ds.Error = api.CodexDaemonNotRunning, string(code), err.Error()
	case code == errs.EACCES || code == errs.EBUSY:
		ds.State, ds.Code, ds.Error = api.CodexDaemonRefused, string(code), err.Error()
	default:
		ds.State, ds.Code, ds.Error = api.CodexDaemonError, string(code), err.Error()
	}
	return ds
}

// Ops registers the Codex CLI operations.
func (m *Module) Ops(t api.Table) {
	api.Handle(t, api.CLIAttach, func(ctx context.Context, a api.CLIAttachArgs) (api.CLIAttachReply, error) {
		if m.codexErr != nil {
			return api.CLIAttachReply{}, m.codexErr
		}
		// A live session may let a batch that waited for it go.
		defer m.h.Poke(ctx)
		return m.fgs.Attach(ctx, ipc.ConnOf(ctx), a)
	})
	api.Handle(t, api.CLIDetach, func(ctx context.Context, _ api.Empty) (api.CLIDetachReply, error) {
		return m.fgs.Detach(ctx, ipc.ConnOf(ctx))
	})
	api.Handle(t, api.ThreadTrust, func(ctx context.Context, a api.ThreadTrustArgs) (api.ThreadTrustReply, error) {
		return m.trust(ctx, codex.TrustThread{ThreadID: a.ThreadID, Trust: a.Trust})
	})
	api.Handle(t, api.ThreadUntrust, func(ctx context.Context, a api.ThreadTrustArgs) (api.ThreadTrustReply, error) {
		return m.trust(ctx, codex.UntrustThread{ThreadID: a.ThreadID})
	})
	api.Handle(t, api.CLISessionList, func(_ context.Context, a api.SessionListArgs) (page query.SessionPage, err error) {
		err = m.h.Eng.Read(func(s engine.Snapshot) error {
			page, err = query.Sessions(s, query.SessionFilter{ThreadID: a.BoundThreadID, State: fsm.SessionState(a.State), After: a.After, Limit: a.Limit})
			return err
		})
		return page, err
	})
	api.Handle(t, api.CLISessionInspect, func(_ context.Context, a api.SessionInspectArgs) (in query.SessionInspection, err error) {
		if a.ManagedSessionID == "" && a.BoundThreadID == "" {
			return in, errs.New(errs.EINVAL, "name a managed session or a thread")
		}
		err = m.h.Eng.Read(func(s engine.Snapshot) error {
			in, err = query.InspectSession(s, a.ManagedSessionID, a.BoundThreadID)
			return err
		})
		return in, err
	})
}

// trust records the user's trust in a thread (or takes it back) and
// lets a result that waited for it go.
func (m *Module) trust(ctx context.Context, d engine.Decider) (api.ThreadTrustReply, error) {
	res, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorOperator, CorrelationID: "thread-trust"}, d)
	if err != nil {
		return api.ThreadTrustReply{}, err
	}
	defer m.h.Poke(ctx)
	var thread string
	switch c := d.(type) {
	case codex.TrustThread:
		thread = c.ThreadID
	case codex.UntrustThread:
		thread = c.ThreadID
	}
	rep := api.ThreadTrustReply{Outcome: res.Outcome, ThreadID: thread, Trust: m.h.Config.CLI.HomeTrust(), Source: "home"}
	err = m.h.Eng.Read(func(v engine.Snapshot) error {
		tr, err := codex.TrustOf(v, thread)
		if tr != "" {
			rep.Trust, rep.Source = tr, "thread"
		}
		return err
	})
	return rep, err
}
