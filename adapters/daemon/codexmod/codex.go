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
	// codex is the Codex CLI adapter: the shared app-server, started when
	// a CLI session first needs it, and the attached foregrounds.
	codex    *sessions.Manager
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
	m.codex, m.codexErr = m.newCodex()
	if !h.Replaced(string(command.TargetCodexCLI)) {
		m.target = clitarget.New(clitarget.ConfigOf(h.Config, m.codexErr), m.codex, h.Eng, h.Clock.Now, h.Log.With("target", string(command.TargetCodexCLI)))
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
	if m.codex == nil {
		return nil
	}
	if err := m.codex.Stop(ctx); err != nil {
		m.h.Log.Error("stop the codex app-server", "err", err)
	}
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

// newCodex sets up the Codex CLI adapter. It starts nothing: the shared
// app-server starts when a `cbth cli run` first needs it, so a home that
// never uses the CLI target never runs Codex. A configuration that cannot
// run Codex is kept as an error for the CLI operations to return, not a
// reason to refuse to start.
func (m *Module) newCodex() (*sessions.Manager, error) {
	h, c := m.h.Home, m.h.Config
	codexHome, err := c.CodexHomeDir(os.Getenv)
	sm := sessions.New(sessions.Config{
		Codex: c.CodexBinaryName(), CodexHome: codexHome, RunDir: filepath.Join(h.RunDir(), "codex"),
		Args:    mcpOverrides(h.Root, m.h.Log),
		TempDir: h.TempDir(), LogPath: filepath.Join(h.LogDir(), appServerLog), Env: c.ChildEnv(os.LookupEnv),
		Version: m.h.Version, Clock: m.h.Clock, Log: m.h.Log.With("component", "codex"), Steer: c.CLI.Steer,
	}, m.h.Eng)
	return sm, err
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
}

// Ops registers the Codex CLI operations.
func (m *Module) Ops(t api.Table) {
	api.Handle(t, api.CLIAttach, func(ctx context.Context, a api.CLIAttachArgs) (api.CLIAttachReply, error) {
		if m.codexErr != nil {
			return api.CLIAttachReply{}, m.codexErr
		}
		// A live session may let a batch that waited for it go.
		defer m.h.Poke(ctx)
		return m.codex.Attach(ctx, ipc.ConnOf(ctx), a)
	})
	api.Handle(t, api.CLIDetach, func(ctx context.Context, _ api.Empty) (api.CLIDetachReply, error) {
		return m.codex.Detach(ctx, ipc.ConnOf(ctx))
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
