package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cbth-dev/cbth/adapters/codex/clitarget"
	"github.com/cbth-dev/cbth/adapters/codex/mcpconfig"
	"github.com/cbth-dev/cbth/adapters/target"

	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/internal/errs"
)

// newCodex sets up the Codex CLI adapter. It starts nothing: the shared
// app-server starts when a `cbth cli run` first needs it, so a home that
// never uses the CLI target never runs Codex. A configuration that cannot
// run Codex is kept as an error for the CLI operations to return, not a
// reason to refuse to start.
func (d *Daemon) newCodex(opt Options) (*sessions.Manager, error) {
	h := opt.Home
	codexHome, err := opt.Config.CodexHomeDir(os.Getenv)
	m := sessions.New(sessions.Config{
		Codex: opt.Config.CodexBinaryName(), CodexHome: codexHome, RunDir: filepath.Join(h.RunDir(), "codex"),
		Args:    mcpOverrides(h.Root, opt.Log),
		TempDir: h.TempDir(), LogPath: filepath.Join(h.LogDir(), "codex-app-server.log"), Env: opt.Config.ChildEnv(os.LookupEnv),
		Version: opt.Version, Clock: opt.Clock, Log: opt.Log.With("component", "codex"), Steer: opt.Config.CLI.Steer,
	}, d.eng)
	return m, err
}

// mcpOverrides make every session of the shared app-server load cbth's
// MCP server for this home (spec/mcp.md), whether or not the user ran
// `cbth mcp install`: the agent in a managed session can always hand its
// work back to cbth.
func mcpOverrides(root string, log *slog.Logger) []string {
	exe, err := os.Executable()
	if err != nil {
		log.Warn("the agent's MCP tools are off: this executable's path is unknown", "err", err)
		return nil
	}
	return mcpconfig.Entry{Command: exe, Home: root, Approve: mcpconfig.ApprovalTools}.Overrides()
}

func (d *Daemon) codexOps(t api.Table) {
	api.Handle(t, api.CLIAttach, func(ctx context.Context, a api.CLIAttachArgs) (api.CLIAttachReply, error) {
		if d.codexErr != nil {
			return api.CLIAttachReply{}, d.codexErr
		}
		// A live session may let a batch that waited for it go.
		defer d.poke(ctx)
		return d.codex.Attach(ctx, ipc.ConnOf(ctx), a)
	})
	api.Handle(t, api.CLIDetach, func(ctx context.Context, _ api.Empty) (api.CLIDetachReply, error) {
		return d.codex.Detach(ctx, ipc.ConnOf(ctx))
	})
	api.Handle(t, api.CLISessionList, func(_ context.Context, a api.SessionListArgs) (page query.SessionPage, err error) {
		err = d.eng.Read(func(s engine.Snapshot) error {
			page, err = query.Sessions(s, query.SessionFilter{ThreadID: a.BoundThreadID, State: fsm.SessionState(a.State), After: a.After, Limit: a.Limit})
			return err
		})
		return page, err
	})
	api.Handle(t, api.CLISessionInspect, func(_ context.Context, a api.SessionInspectArgs) (in query.SessionInspection, err error) {
		if a.ManagedSessionID == "" && a.BoundThreadID == "" {
			return in, errs.New(errs.EINVAL, "name a managed session or a thread")
		}
		err = d.eng.Read(func(s engine.Snapshot) error {
			in, err = query.InspectSession(s, a.ManagedSessionID, a.BoundThreadID)
			return err
		})
		return in, err
	})
}

// addCLITarget registers the Codex CLI delivery target on the shared
// app-server, unless Options.Targets put another one in.
func (d *Daemon) addCLITarget() {
	if d.target(string(command.TargetCodexCLI)) != nil {
		return
	}
	c := d.opt.Config
	t := clitarget.New(clitarget.Config{
		AcceptTimeout: c.CLI.AcceptanceTimeout.Duration, ObservationWindow: c.CLI.ObservationWindow.Duration,
		ReconcileWindow: c.CLI.ReconcileWindow.Duration, SettleDelay: c.CLI.SettleDelay.Duration,
		TrustedAll: c.CLI.TrustedAll, Steer: c.CLI.Steer, InlineLimit: c.Delivery.InlinePayloadLimit, Unavailable: d.codexErr,
	}, d.codex, d.eng, d.opt.Clock.Now, d.opt.Log.With("target", string(command.TargetCodexCLI)))
	d.targets = append(d.targets, target.Target(t))
	slices.SortFunc(d.targets, func(a, b target.Target) int { return strings.Compare(a.Spec().Name, b.Spec().Name) })
}
