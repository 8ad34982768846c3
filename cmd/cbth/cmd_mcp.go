package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/cbth-dev/cbth/adapters/codex/mcpconfig"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/mcpserver"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// McpCmd groups cbth as an MCP server for the agent inside Codex
// (spec/mcp.md).
type McpCmd struct {
	Serve     McpServeCmd     `cmd:"" help:"Serve the agent's cbth tools over MCP on stdio (Codex starts this itself)."`
	Install   McpInstallCmd   `cmd:"" help:"Add cbth's MCP server, its tool approvals and the cbth skill to Codex's config."`
	Uninstall McpUninstallCmd `cmd:"" help:"Remove what cbth mcp install added to Codex's config."`
}

// McpServeCmd is `cbth mcp serve`.
type McpServeCmd struct{}

// Run serves MCP on stdin and stdout until the client closes them.
func (c *McpServeCmd) Run(env *Env) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// stdout is the protocol: everything else goes to stderr, which
	// Codex keeps in its log.
	log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := env.Home()
	if err != nil {
		return err
	}
	fps, err := observedFingerprints()
	if err != nil {
		return err
	}
	rules := func() (home.MCP, error) {
		cfg, err := h.LoadConfig(env.Getenv)
		return cfg.MCP, err
	}
	s := mcpserver.New(mcpserver.Config{Daemon: mcpDaemon{env}, Version: Version, Inbox: h.Inbox(), Fingerprints: fps, Rules: rules, Log: log})
	if err := s.Run(ctx, mcpserver.Stdio(os.Stdin, os.Stdout)); err != nil && ctx.Err() == nil && !isEOF(err) {
		return errs.Wrap(errs.EHOSTDOWN, err, "mcp serve")
	}
	return nil
}

func isEOF(err error) bool {
	return err == io.EOF || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "closed")
}

// mcpDaemon reaches the daemon as every command does: a connection per
// call, the daemon started when it is not running.
type mcpDaemon struct{ env *Env }

func (d mcpDaemon) JobSubmit(_ context.Context, a api.MCPSubmitArgs) (api.MCPSubmitReply, error) {
	return call(d.env, api.MCPJobSubmit, a)
}

func (d mcpDaemon) TaskRun(_ context.Context, a api.MCPTaskRunArgs) (api.MCPTaskRunReply, error) {
	return call(d.env, api.MCPTaskRun, a)
}

func (d mcpDaemon) JobStatus(_ context.Context, a api.MCPJobArgs) (query.JobView, error) {
	return call(d.env, api.MCPJobStatus, a)
}

func (d mcpDaemon) JobList(_ context.Context, a api.MCPJobListArgs) (query.JobPage, error) {
	return call(d.env, api.MCPJobList, a)
}

func (d mcpDaemon) JobCancel(_ context.Context, a api.MCPJobArgs) (api.TransitionReply, error) {
	return call(d.env, api.MCPJobCancel, a)
}

func (d mcpDaemon) WatchStart(_ context.Context, a api.MCPTaskRunArgs) (api.MCPTaskRunReply, error) {
	return call(d.env, api.MCPWatchStart, a)
}

func (d mcpDaemon) WatchStop(_ context.Context, a api.MCPTaskArgs) (api.TaskCancelReply, error) {
	return call(d.env, api.MCPWatchStop, a)
}

func (d mcpDaemon) TaskOutput(_ context.Context, a api.MCPTaskOutputArgs) (api.TaskOutputReply, error) {
	return call(d.env, api.MCPTaskOutput, a)
}

func (d mcpDaemon) DesktopPreflight(_ context.Context, a api.MCPDesktopArgs) (api.PreflightReply, error) {
	return call(d.env, api.MCPDesktopPreflight, a)
}

func (d mcpDaemon) DesktopNoteArmPending(_ context.Context, a api.MCPArmArgs) (api.ArmPendingReply, error) {
	return call(d.env, api.MCPDesktopNoteArmPending, a)
}

func (d mcpDaemon) DesktopNoteArm(_ context.Context, a api.MCPArmArgs) (api.ArmReply, error) {
	return call(d.env, api.MCPDesktopNoteArm, a)
}

func (d mcpDaemon) DesktopNotePaused(_ context.Context, a api.MCPPausedArgs) (api.PausedReply, error) {
	return call(d.env, api.MCPDesktopNotePaused, a)
}

func (d mcpDaemon) DesktopNoteBoundaryCrossed(_ context.Context, a api.MCPBoundaryArgs) (api.BoundaryReply, error) {
	return call(d.env, api.MCPDesktopNoteBoundaryCrossed, a)
}

func (d mcpDaemon) DesktopReadArtifact(_ context.Context, a api.MCPReadArtifactArgs) (api.ReadArtifactReply, error) {
	return call(d.env, api.MCPDesktopReadArtifact, a)
}

func (d mcpDaemon) DesktopValidate(_ context.Context, a api.MCPValidateArgs) (api.MCPValidateReply, error) {
	return call(d.env, api.MCPDesktopValidate, a)
}

// codexTarget is the Codex home and cbth entry that install, uninstall
// and doctor work on.
type codexTarget struct {
	CodexHome string
	Config    string
	Entry     mcpconfig.Entry
}

// mcpTarget resolves the Codex home (--codex-home, else codex_home in
// cbth's config, else $CODEX_HOME, else ~/.codex: the one cbth's shared
// app-server runs with) and the entry for this home and executable,
// checked (install) as a program Codex may run.
func mcpTarget(env *Env, codexHome, command string, install bool) (codexTarget, error) {
	h, err := env.Home()
	if err != nil {
		return codexTarget{}, err
	}
	if codexHome == "" {
		cfg, err := h.LoadConfig(env.Getenv)
		if err != nil {
			return codexTarget{}, err
		}
		if codexHome, err = cfg.CodexHomeDir(env.Getenv); err != nil {
			return codexTarget{}, err
		}
	}
	if codexHome, err = filepath.Abs(codexHome); err != nil {
		return codexTarget{}, errs.Wrap(errs.EINVAL, err, "--codex-home")
	}
	what := "--command"
	if command == "" {
		what = "this cbth executable"
		if command, err = os.Executable(); err != nil {
			return codexTarget{}, errs.Wrap(errs.EINTERNAL, err, "this executable's path")
		}
	}
	// Codex runs it, outside its sandbox, at every session: the same
	// checks as the program a service runs. Uninstall writes no command.
	if install {
		if err := home.CheckProgram(what, command); err != nil {
			return codexTarget{}, err
		}
	}
	return codexTarget{CodexHome: codexHome, Config: filepath.Join(codexHome, "config.toml"),
		Entry: mcpconfig.Entry{Command: command, Home: h.Root, Approve: mcpconfig.DefaultApproved()}}, nil
}

// McpInstallCmd is `cbth mcp install`.
type McpInstallCmd struct {
	CodexHome string   `name:"codex-home" placeholder:"DIR" help:"The Codex home to configure (default: codex_home in cbth's config, else $CODEX_HOME, else ~/.codex)."`
	Command   string   `name:"command" placeholder:"PATH" help:"The cbth executable Codex runs, an absolute path to a file only you (or root) can rewrite (default: this one)."`
	NoSkill   bool     `name:"no-skill" help:"Do not write the cbth skill."`
	Approve   []string `name:"approve" sep:"," placeholder:"TOOL,..." help:"Also pre-approve these tools, which Codex otherwise asks about at every call: task_run (then any command your [mcp] rules allow runs outside Codex's sandbox without a prompt), desktop_bridge_preflight."`
	Trust     string   `name:"trust" placeholder:"own-permissions" help:"Also write [cli] trust = own_permissions into cbth's config.toml: results then go into every Codex thread as a new turn with that thread's own permissions (Codex's default session may write and ask approvals), not only into strict-safe threads. Only when you ask."`
}

type mcpInstallResult struct {
	Config        string   `json:"config"`
	ConfigChanged bool     `json:"config_changed"`
	Skill         string   `json:"skill"`
	SkillChanged  bool     `json:"skill_changed"`
	Command       string   `json:"command"`
	CBTHHome      string   `json:"cbth_home"`
	Approved      []string `json:"approved_tools"`
	// Asks are the tools that act that Codex asks about at every call.
	Asks []string `json:"not_approved_tools"`
	// Meaning says what each opt-in approval given means.
	Meaning  []string `json:"approval_notes"`
	Warnings []string `json:"warnings"`
	// Trust is the [cli] trust written into cbth's config.toml, when
	// --trust asked for it; TrustNote says what it means.
	Trust        string `json:"trust,omitempty"`
	TrustConfig  string `json:"trust_config,omitempty"`
	TrustChanged bool   `json:"trust_changed,omitempty"`
	TrustNote    string `json:"trust_note,omitempty"`
}

// Run writes the entry and the skill.
func (c *McpInstallCmd) Run(env *Env) error {
	approve, err := mcpconfig.Approvals(c.Approve)
	if err != nil {
		return err
	}
	trust := ""
	switch c.Trust {
	case "":
	case "own-permissions", events.TrustOwnPermissions:
		trust = events.TrustOwnPermissions
	default:
		return errs.New(errs.EINVAL, "--trust %q: the one trust mcp install writes is own-permissions (strict, the default, needs nothing written)", c.Trust)
	}
	t, err := mcpTarget(env, c.CodexHome, c.Command, true)
	if err != nil {
		return err
	}
	t.Entry.Approve = approve
	res := mcpInstallResult{Config: t.Config, Command: t.Entry.Command, CBTHHome: t.Entry.Home, Approved: approve, Asks: []string{}, Meaning: []string{}, Warnings: []string{}}
	for _, tool := range mcpconfig.ApprovalTools {
		if note, opt := mcpconfig.OptIn[tool]; opt {
			if slices.Contains(approve, tool) {
				res.Meaning = append(res.Meaning, note)
			} else {
				res.Asks = append(res.Asks, tool)
			}
		}
	}
	if tmp := os.TempDir(); strings.HasPrefix(t.Entry.Command, filepath.Join(tmp, "go-build")) || strings.Contains(t.Entry.Command, "/go-build") {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s is a temporary build (go run): install a built cbth and run its mcp install, or pass --command", t.Entry.Command))
	}
	if res.ConfigChanged, err = mcpconfig.Install(t.Config, t.Entry); err != nil {
		return err
	}
	if !c.NoSkill {
		if res.Skill, res.SkillChanged, err = mcpconfig.WriteSkill(t.CodexHome); err != nil {
			return err
		}
	}
	if trust != "" {
		h, err := env.Home()
		if err == nil {
			err = h.Ensure()
		}
		if err != nil {
			return err
		}
		if res.TrustChanged, err = home.SetHomeTrust(h.Config(), trust); err != nil {
			return err
		}
		res.TrustConfig = h.Config()
		res.Trust = trust
		res.TrustNote = "every Codex thread you did not trust otherwise (cbth thread trust) now gets its results as a new turn with its own permissions: a thread that may write files, reach the network or ask for approvals does so in that turn as in one you typed. cbth daemon restart makes a running daemon read it"
	}
	for _, w := range res.Warnings {
		fmt.Fprintln(env.Stderr, "cbth: warning:", w)
	}
	return env.emit(res, func(w io.Writer) {
		state := map[bool]string{true: "updated", false: "already up to date"}
		fmt.Fprintf(w, "%s: [mcp_servers.cbth] %s (command %s, CBTH_HOME %s; approved: %s)\n",
			res.Config, state[res.ConfigChanged], res.Command, res.CBTHHome, strings.Join(res.Approved, ", "))
		if res.Skill != "" {
			fmt.Fprintf(w, "%s: %s\n", res.Skill, state[res.SkillChanged])
		}
		for _, n := range res.Meaning {
			fmt.Fprintln(w, "Note:", n+".")
		}
		if res.Trust != "" {
			fmt.Fprintf(w, "%s: [cli] trust = %q %s. Note: %s.\n", res.TrustConfig, res.Trust, state[res.TrustChanged], res.TrustNote)
		}
		if len(res.Asks) > 0 {
			fmt.Fprintf(w, "Not approved: %s. Codex asks you before each call; in a thread with approval_policy = \"never\" it refuses them. To pre-approve: cbth mcp install --approve %s\n",
				strings.Join(res.Asks, ", "), strings.Join(res.Asks, ","))
		}
		fmt.Fprintln(w, "New Codex sessions get the tools in the mcp__cbth namespace. task_run runs only what you allow, whole, in", filepath.Join(t.Entry.Home, "config.toml")+":")
		fmt.Fprintln(w, "  [mcp]\n  task_allow = [[\"make\", \"test\"]]")
	})
}

// McpUninstallCmd is `cbth mcp uninstall`.
type McpUninstallCmd struct {
	CodexHome string `name:"codex-home" placeholder:"DIR" help:"The Codex home to clean (default: as for install)."`
}

type mcpUninstallResult struct {
	Config       string `json:"config"`
	Removed      bool   `json:"removed"`
	SkillRemoved bool   `json:"skill_removed"`
}

// Run removes the entry and the skill.
func (c *McpUninstallCmd) Run(env *Env) error {
	t, err := mcpTarget(env, c.CodexHome, "", false)
	if err != nil {
		return err
	}
	res := mcpUninstallResult{Config: t.Config}
	if res.Removed, err = mcpconfig.Uninstall(t.Config); err != nil {
		return err
	}
	if res.SkillRemoved, err = mcpconfig.RemoveSkill(t.CodexHome); err != nil {
		return err
	}
	return env.emit(res, func(w io.Writer) {
		if !res.Removed && !res.SkillRemoved {
			fmt.Fprintf(w, "%s: no cbth entry to remove\n", t.Config)
			return
		}
		fmt.Fprintf(w, "%s: cbth entry removed: %v; skill removed: %v\n", t.Config, res.Removed, res.SkillRemoved)
	})
}
