package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/session"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// CtxCmd groups the ctx tree verbs.
type CtxCmd struct {
	Init    CtxInitCmd `cmd:"" help:"Create the object tree with the built-in debug/echo model."`
	History HistoryCmd `cmd:"" help:"Print a session's conversation (messages.jsonl) of an agent or model."`
	Latest  LatestCmd  `cmd:"" help:"Print a session's latest answer (latest.md)."`
	Session SessionCmd `cmd:"" help:"List and show an agent's or model's sessions."`
}

// CtxInitCmd is `ctx init`.
type CtxInitCmd struct {
	Root   string `help:"Tree root (default: $CTX_ROOT, else $CBTH_HOME/ctx)." type:"path"`
	Runner string `help:"The object runner the shebangs name (default: cortexfs-object-runner beside cbth, else on PATH); it must exist." type:"path"`
}

// Run implements the command.
func (c *CtxInitCmd) Run(env *Env) error {
	root := cmp.Or(c.Root, env.CtxRoot)
	run := cmp.Or(c.Runner, env.Runner)
	if err := checkRunner(run); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(root), 0o700); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "create parent of %s", root)
	}
	set, _, err := env.store().Load(root)
	if err != nil {
		return err
	}
	set = tree.Seed(set, run)
	if err := env.store().Save(root, set); err != nil {
		return err
	}
	return env.emit(env.JSON, map[string]any{"root": root, "runner": run, "objects": len(set.Objects)}, func(w io.Writer) {
		fmt.Fprintf(w, "initialized %s (runner %s)\n", root, run)
	})
}

// ModelCmd groups the model verbs.
type ModelCmd struct {
	Add   ModelAddCmd   `cmd:"" help:"Add or replace a model object."`
	List  ModelListCmd  `cmd:"" help:"List model objects."`
	Alias ModelAliasCmd `cmd:"" help:"Point an alias symlink at a model."`
	Rm    ModelRmCmd    `cmd:"" help:"Remove a model object."`
	Serve ModelServeCmd `cmd:"" help:"Serve a session=socket model's .sock in the foreground (by the daemon, if there is one; exits EHOSTDOWN if it goes away)."`
}

// ModelAddCmd is `model add`.
type ModelAddCmd struct {
	Model         string   `arg:"" help:"provider/model, or just model with --base-url (provider = host name)."`
	Driver        []string `required:"" sep:"none" help:"Driver route: a driver name, or KEY=DRIVER[,DRIVER...] with KEY default|exec|socket|agent. Repeatable."`
	ID            string   `name:"id" required:"" help:"Provider-native model id."`
	BaseURL       string   `name:"base-url" help:"Custom provider base URL (shown in .d/default; never a secret)."`
	Default       []string `sep:"none" help:"Default parameter KEY=VALUE. Repeatable."`
	Cap           []string `sep:"none" help:"Capability word. Repeatable. Default: chat, stream."`
	Session       string   `default:"none" enum:"none,socket" help:"none or socket."`
	Description   string   `help:"Metadata description."`
	ContextLength int64    `name:"context-length" help:"Metadata context_length."`
}

// Run implements the command.
func (c *ModelAddCmd) Run(env *Env) error {
	path := c.Model
	if !strings.Contains(path, "/") && c.BaseURL != "" {
		host, err := name.ProviderFromBaseURL(c.BaseURL)
		if err != nil {
			return err
		}
		path = host + "/" + path
	}
	id, err := name.ParseModel(path)
	if err != nil {
		return err
	}
	routes, err := object.ParseRoutes(strings.Join(c.Driver, "\n"))
	if err != nil {
		return err
	}
	var defs []object.KV
	if c.BaseURL != "" {
		if _, err := name.ProviderFromBaseURL(c.BaseURL); err != nil {
			return err
		}
		defs = append(defs, object.KV{Key: "base_url", Value: c.BaseURL})
	}
	if len(c.Default) > 0 {
		more, err := object.ParseDefaults(strings.Join(c.Default, "\n"))
		if err != nil {
			return err
		}
		defs = append(defs, more...)
	}
	caps := c.Cap
	if len(caps) == 0 {
		caps = []string{"chat", "stream"}
	}
	if c.Session == object.SessionSocket && !slices.Contains(caps, "session") {
		caps = append(caps, "session")
	}
	created := ""
	if env.Now != nil {
		created = env.Now().UTC().Format("2006-01-02T15:04:05Z")
	}
	o := object.Object{Kind: object.KindModel, Path: id.String(),
		Meta: object.Meta{ID: id.String(), Name: id.Model, Description: c.Description, Type: object.KindModel,
			CreatedAt: created, OwnedBy: id.Provider, ContextLength: c.ContextLength},
		NativeID: c.ID, Driver: routes, Caps: caps, Defaults: defs, Session: c.Session, Status: "ready"}
	if err := o.Validate(); err != nil {
		return err
	}
	set, err := load(env)
	if err != nil {
		return err
	}
	replaced := false
	for i := range set.Objects {
		if set.Objects[i].Rel() == o.Rel() {
			set.Objects[i], replaced = o, true
		}
	}
	if !replaced {
		set.Objects = append(set.Objects, o)
	}
	if err := save(env, set); err != nil {
		return err
	}
	return env.emit(env.JSON, modelInfo(env.CtxRoot, set, o), func(w io.Writer) { fmt.Fprintf(w, "added model/%s\n", o.Path) })
}

// load reads the tree, creating it (with debug/echo) if it is not there.
func load(env *Env) (tree.Set, error) {
	set, exists, err := env.store().Load(env.CtxRoot)
	if err != nil {
		return tree.Set{}, err
	}
	if !exists {
		if err := os.MkdirAll(filepath.Dir(env.CtxRoot), 0o700); err != nil {
			return tree.Set{}, errs.Wrap(errs.EINTERNAL, err, "create parent of %s", env.CtxRoot)
		}
		return tree.Seed(set, env.Runner), nil
	}
	if set.Runner == "" {
		set.Runner = env.Runner
	}
	return set, nil
}

// save registers set as the tree at env.CtxRoot, unless its objects could
// not run.
func save(env *Env, set tree.Set) error {
	if err := checkRunner(set.Runner); err != nil {
		return err
	}
	return env.store().Save(env.CtxRoot, set)
}

// ModelInfo is one row of `model list --json`.
type ModelInfo struct {
	Model    string      `json:"model"`
	Path     string      `json:"path"`
	NativeID string      `json:"native_id"`
	Driver   string      `json:"driver"`
	Caps     []string    `json:"cap"`
	Defaults []object.KV `json:"default"`
	Session  string      `json:"session"`
	Status   string      `json:"status"`
	Aliases  []string    `json:"aliases"`
	Meta     object.Meta `json:"meta"`
}

func modelInfo(root string, set tree.Set, o object.Object) ModelInfo {
	mi := ModelInfo{Model: o.Path, Path: o.Rel(), NativeID: o.NativeID, Driver: strings.TrimSpace(o.Driver.String()),
		Caps: o.Caps, Defaults: o.Defaults, Session: o.Session, Status: o.Status, Aliases: []string{}, Meta: o.Meta}
	// The state word of .d/status, which the model's calls keep.
	if b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(o.Rel())+".d", object.FileStatus)); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			mi.Status = f[0]
		}
	}
	if mi.Caps == nil {
		mi.Caps = []string{}
	}
	if mi.Defaults == nil {
		mi.Defaults = []object.KV{}
	}
	for _, a := range set.Aliases {
		if a.Target == o.Rel() {
			mi.Aliases = append(mi.Aliases, a.Path)
		}
	}
	return mi
}

// ModelListCmd is `model list`.
type ModelListCmd struct {
}

// Run implements the command.
func (c *ModelListCmd) Run(env *Env) error {
	set, err := load(env)
	if err != nil {
		return err
	}
	rows := []ModelInfo{}
	for _, o := range set.Objects {
		if o.Kind == object.KindModel {
			rows = append(rows, modelInfo(env.CtxRoot, set, o))
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Model < rows[j].Model })
	return env.emit(env.JSON, rows, func(w io.Writer) {
		for _, r := range rows {
			alias := ""
			if len(r.Aliases) > 0 {
				alias = "  <- " + strings.Join(r.Aliases, ", ")
			}
			fmt.Fprintf(w, "%-40s %-28s session=%s%s\n", r.Model, strings.ReplaceAll(r.Driver, "\n", " "), r.Session, alias)
		}
	})
}

// ModelAliasCmd is `model alias`.
type ModelAliasCmd struct {
	Name   string `arg:"" help:"Alias name: main, helper or any name (per user, under home/<uid>/model/)."`
	Model  string `arg:"" help:"provider/model the alias points at."`
	Global bool   `help:"For main and helper: set model/main or model/helper for everyone."`
}

// Run implements the command.
func (c *ModelAliasCmd) Run(env *Env) error {
	if err := name.Valid(c.Name); err != nil {
		return err
	}
	id, err := name.ParseModel(c.Model)
	if err != nil {
		return err
	}
	path := "home/" + strconv.Itoa(env.UID) + "/model/" + c.Name
	if c.Global {
		if c.Name != "main" && c.Name != "helper" {
			return errs.New(errs.EINVAL, "only main and helper are global aliases")
		}
		path = "model/" + c.Name
	}
	set, err := load(env)
	if err != nil {
		return err
	}
	a := tree.Alias{Path: path, Target: "model/" + id.String()}
	if !set.Has(a.Target) {
		return errs.New(errs.ENOENT, "no model %s", id)
	}
	kept := set.Aliases[:0]
	for _, x := range set.Aliases {
		if x.Path != a.Path {
			kept = append(kept, x)
		}
	}
	set.Aliases = append(kept, a)
	if err := save(env, set); err != nil {
		return err
	}
	return env.emit(env.JSON, a, func(w io.Writer) { fmt.Fprintf(w, "%s -> %s\n", a.Path, a.Target) })
}

// ModelRmCmd is `model rm`.
type ModelRmCmd struct {
	Model string `arg:"" help:"provider/model to remove."`
}

// Run implements the command. Aliases that pointed at the model go too,
// except main and helper, which fall back to debug/echo.
func (c *ModelRmCmd) Run(env *Env) error {
	id, err := name.ParseModel(c.Model)
	if err != nil {
		return err
	}
	set, err := load(env)
	if err != nil {
		return err
	}
	rel := "model/" + id.String()
	if !set.Has(rel) {
		return errs.New(errs.ENOENT, "no model %s", id)
	}
	echo := object.DebugEcho().Rel()
	if rel == echo {
		return errs.New(errs.EINVAL, "the built-in %s cannot be removed", id)
	}
	objs := set.Objects[:0]
	for _, o := range set.Objects {
		if o.Rel() != rel {
			objs = append(objs, o)
		}
	}
	set.Objects = objs
	aliases := set.Aliases[:0]
	for _, a := range set.Aliases {
		switch {
		case a.Target != rel:
			aliases = append(aliases, a)
		case a.Path == tree.AliasMain || a.Path == tree.AliasHelper:
			a.Target = echo
			aliases = append(aliases, a)
		}
	}
	set.Aliases = aliases
	if err := save(env, set); err != nil {
		return err
	}
	return env.emit(env.JSON, map[string]string{"removed": id.String()}, func(w io.Writer) { fmt.Fprintf(w, "removed model/%s\n", id) })
}

// ModelServeCmd is `model serve`: the model's socket, served in the
// foreground's lifetime.
type ModelServeCmd struct {
	Model string `arg:"" help:"provider/model with session=socket."`
}

// SocketHost is a Store whose daemon serves the trees' sockets itself.
// Hold asks it to serve object ("model/P/M") of the tree at root and
// holds the daemon up until release; the socket's sessions are then
// events of the daemon's log, like those of every socket it serves. gone
// is closed when the daemon goes away under the hold (stopped, killed),
// after which its error says why (EHOSTDOWN).
type SocketHost interface {
	Hold(root, object string) (socket string, gone <-chan struct{}, why func() error, release func(), err error)
}

// Run implements the command. With the daemon (cbth's Store) the daemon
// serves the socket and this process only holds it up until interrupted;
// without one (a bare tree) it serves in-process with plain-file sessions.
func (c *ModelServeCmd) Run(env *Env) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if h, ok := env.store().(SocketHost); ok {
		id, err := name.ParseModel(c.Model)
		if err != nil {
			return err
		}
		sock, gone, why, release, err := h.Hold(env.CtxRoot, "model/"+id.String())
		if err != nil {
			return err
		}
		defer release()
		fmt.Fprintf(env.Stderr, "serving %s (by the daemon; sessions are events)\n", sock)
		// The socket is the daemon's: when the daemon goes, so does the
		// socket, and this foreground says so instead of waiting on.
		select {
		case <-ctx.Done():
			return nil
		case <-gone:
			return errs.Wrap(errs.EHOSTDOWN, why(), "the daemon serving %s went away; %s is no longer served", c.Model, sock)
		}
	}
	return ServeModel(ctx, env.CtxRoot, c.Model, env.UID, env.Stderr, env.Now)
}

// ServeModel serves a session=socket model's .sock in-process until ctx
// ends, its sessions kept as plain files: a tree without a daemon.
func ServeModel(ctx context.Context, ctxRoot, model string, uid int, stderr io.Writer, now func() time.Time) error {
	srv, ln, err := PrepareModel(ctxRoot, model, uid, stderr, now, nil)
	if err != nil {
		return err
	}
	defer ln.Close()
	if f, ok := srv.Store.(*session.Files); ok {
		f.Now = now
		defer f.Close()
	}
	fmt.Fprintf(stderr, "serving %s\n", ln.Path)
	return srv.Serve(ctx, ln.ln)
}
