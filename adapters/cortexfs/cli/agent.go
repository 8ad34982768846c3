package cli

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tool"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/internal/confine"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// AgentCmd groups the agent verbs.
type AgentCmd struct {
	Add  AgentAddCmd  `cmd:"" help:"Add or replace an agent object (agent/NAME, served on agent/NAME.sock by the daemon)."`
	List AgentListCmd `cmd:"" help:"List agent objects."`
	Rm   AgentRmCmd   `cmd:"" help:"Remove an agent object (its sessions and root stay)."`
}

// AgentAddCmd is `agent add`.
type AgentAddCmd struct {
	Name        string   `arg:"" help:"Agent name (one path component)."`
	Model       string   `required:"" help:"provider/model the agent calls (a model of the tree)."`
	Tool        []string `sep:"none" help:"A built-in tool the agent may run (fs.read, fs.list, fs.write, fs.search, shell.exec, cbth.job.submit). Repeatable."`
	AgentRoot   string   `name:"root" help:"The agent's root directory (default: home/<uid>/agent/NAME/root under the tree). fs.* tools see nothing outside it; shell.exec may read and write only it (plus read the system's directories) and use no unix socket where the OS confines (Landlock and seccomp, sandbox-exec; cbth doctor says what this system confines), and can reach anything of yours where it cannot. The network is never confined. agent add says what is not confined here when it adds an agent with shell.exec." type:"path"`
	Cwd         string   `help:"Default working directory inside the root (default /)."`
	TrustedAll  bool     `name:"trusted-all" help:"Let the ctx target deliver this agent any job result. Without it an agent with shell.exec or fs.write takes only results whose delivery policy is read-only and needs no approval, network or write access; the others are parked."`
	Description string   `help:"Metadata description."`
}

// ToolObject is the object of a built-in tool.
func ToolObject(s tool.Spec) object.Object {
	return object.Object{Kind: object.KindTool, Path: s.Name,
		Meta:    object.Meta{ID: s.Name, Name: s.Name, Description: s.Description, Type: object.KindTool, OwnedBy: "cbth"},
		Session: object.SessionNone, Status: "ready"}
}

// AgentRoot is where an agent's root is when .d/root is empty.
func AgentRoot(ctxRoot string, uid int, o object.Object) string {
	if o.Root != "" {
		return o.Root
	}
	return filepath.Join(ctxRoot, "home", strconv.Itoa(uid), "agent", o.Path, "root")
}

// Run implements the command.
func (c *AgentAddCmd) Run(env *Env) error {
	if err := name.Valid(c.Name); err != nil {
		return err
	}
	id, err := name.ParseModel(c.Model)
	if err != nil {
		return err
	}
	for _, t := range c.Tool {
		if _, ok := tool.Lookup(t); !ok {
			return errs.New(errs.ENOENT, "no built-in tool %s", t)
		}
	}
	set, err := load(env)
	if err != nil {
		return err
	}
	if !set.Has("model/" + id.String()) {
		return errs.New(errs.ENOENT, "no model %s in the tree (add it with `cbth model add`)", id)
	}
	created := ""
	if env.Now != nil {
		created = env.Now().UTC().Format("2006-01-02T15:04:05Z")
	}
	o := object.Object{Kind: object.KindAgent, Path: c.Name,
		Meta:    object.Meta{ID: c.Name, Name: c.Name, Description: c.Description, Type: object.KindAgent, CreatedAt: created, OwnedBy: strconv.Itoa(env.UID)},
		Session: object.SessionSocket, Status: "ready", Model: id.String(), Tools: c.Tool, Root: c.AgentRoot, Cwd: c.Cwd}
	if c.TrustedAll {
		o.Delivery = object.TrustedAll
	}
	if err := o.Validate(); err != nil {
		return err
	}
	set = withObject(set, o)
	for _, s := range tool.Builtins() {
		if !set.Has("tool/" + s.Name) {
			set = withObject(set, ToolObject(s))
		}
	}
	if err := save(env, set); err != nil {
		return err
	}
	info := agentInfo(env, o)
	if slices.Contains(c.Tool, tool.ShellExec) && env.Stderr != nil {
		// Said when the root is given, not only by doctor: what this
		// system does not keep the agent's commands from.
		st := confine.Check()
		label := "note"
		if len(st.Unconfined()) > 0 {
			label = "WARNING"
		}
		fmt.Fprintf(env.Stderr, "cbth: %s: shell.exec of agent/%s runs as you in %s; %s\n", label, o.Path, info.Root, st.Summary())
	}
	return env.emit(env.JSON, info, func(w io.Writer) {
		fmt.Fprintf(w, "added agent/%s (model %s, root %s)\n", o.Path, o.Model, info.Root)
	})
}

func withObject(set tree.Set, o object.Object) tree.Set {
	for i := range set.Objects {
		if set.Objects[i].Rel() == o.Rel() {
			set.Objects[i] = o
			return set
		}
	}
	set.Objects = append(set.Objects, o)
	return set
}

// AgentInfo is one row of `agent list --json`.
type AgentInfo struct {
	Agent string   `json:"agent"`
	Path  string   `json:"path"`
	Model string   `json:"model"`
	Tools []string `json:"tools"`
	Root  string   `json:"root"`
	Cwd   string   `json:"cwd"`
	// TrustedAll: the ctx target delivers it any job result.
	TrustedAll bool `json:"trusted_all"`
}

func agentInfo(env *Env, o object.Object) AgentInfo {
	ai := AgentInfo{Agent: o.Path, Path: o.Rel(), Model: o.Model, Tools: o.Tools, Root: AgentRoot(env.CtxRoot, env.UID, o), Cwd: o.Cwd,
		TrustedAll: o.Delivery == object.TrustedAll}
	if ai.Tools == nil {
		ai.Tools = []string{}
	}
	if ai.Cwd == "" {
		ai.Cwd = "/"
	}
	return ai
}

// AgentListCmd is `agent list`.
type AgentListCmd struct{}

// Run implements the command.
func (c *AgentListCmd) Run(env *Env) error {
	set, err := load(env)
	if err != nil {
		return err
	}
	rows := []AgentInfo{}
	for _, o := range set.Objects {
		if o.Kind == object.KindAgent {
			rows = append(rows, agentInfo(env, o))
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Agent < rows[j].Agent })
	return env.emit(env.JSON, rows, func(w io.Writer) {
		for _, r := range rows {
			fmt.Fprintf(w, "%-24s %-32s %v\n", r.Agent, r.Model, r.Tools)
		}
	})
}

// AgentRmCmd is `agent rm`.
type AgentRmCmd struct {
	Name string `arg:"" help:"Agent name."`
}

// Run implements the command. Sessions are history: they stay.
func (c *AgentRmCmd) Run(env *Env) error {
	set, err := load(env)
	if err != nil {
		return err
	}
	rel := "agent/" + c.Name
	if !set.Has(rel) {
		return errs.New(errs.ENOENT, "no agent %s", c.Name)
	}
	objs := set.Objects[:0]
	for _, o := range set.Objects {
		if o.Rel() != rel {
			objs = append(objs, o)
		}
	}
	set.Objects = objs
	if err := save(env, set); err != nil {
		return err
	}
	return env.emit(env.JSON, map[string]string{"removed": c.Name}, func(w io.Writer) { fmt.Fprintf(w, "removed agent/%s\n", c.Name) })
}
