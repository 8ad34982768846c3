package doctor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/mcpconfig"
	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/runner"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/confine"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
	"github.com/cbth-dev/cbth/internal/plural"
	"github.com/cbth-dev/cbth/projections"
)

// Env is what the checks look at.
type Env struct {
	Home      home.Home
	CtxRoot   string
	Getenv    func(string) string
	LookupEnv func(string) (string, bool)
	// Executable is this binary: the runner and the provider helper are
	// looked for beside it first.
	Executable string
	Version    string
	Proto      int
	UID        int

	// status is the daemon's, when one of this protocol answered.
	status *api.Status
}

func checkHome(_ context.Context, e *Env) []Finding {
	root := e.Home.Root
	fi, err := os.Lstat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return one("", OK, root+" does not exist yet: the first cbth command creates it, private to you (0700)", "")
	case err != nil:
		return one("", Fail, err.Error(), "check that "+root+" is readable by you")
	case !fi.IsDir():
		return one("", Fail, root+" is not a directory", "move it away; cbth creates its home as a directory")
	}
	if uid, ok := owner(fi); ok && uid != e.UID {
		return one("", Fail, fmt.Sprintf("%s is owned by uid %d, not by you (uid %d): cbth refuses a home another user controls", root, uid, e.UID),
			"use a home of your own: set CBTH_HOME, or move "+root+" away")
	}
	if p := fi.Mode().Perm(); p != home.DirMode {
		return one("", Fail, fmt.Sprintf("%s has mode %04o; it must be 0700 so no other user can reach the log, socket or results", root, p),
			"chmod 700 "+quote(root))
	}
	return one("", OK, root+" is a directory private to you (0700)", "")
}

// checkPermissions walks the home: nothing in it may be open to group or
// others, and everything must be yours.
func checkPermissions(ctx context.Context, e *Env) []Finding {
	root := e.Home.Root
	if _, err := os.Lstat(root); err != nil {
		return one("", Skip, "no home yet", "")
	}
	var open, foreign []string
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			open = append(open, p+" (unreadable: "+err.Error()+")")
			return nil
		}
		if n++; n > 200_000 || ctx.Err() != nil {
			return filepath.SkipAll
		}
		if p == root || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if uid, ok := owner(fi); ok && uid != e.UID {
			foreign = append(foreign, fmt.Sprintf("%s (uid %d)", p, uid))
		}
		if fi.Mode().Perm()&0o077 != 0 {
			open = append(open, fmt.Sprintf("%s (%04o)", p, fi.Mode().Perm()))
		}
		return nil
	})
	if err != nil {
		return one("", Fail, err.Error(), "check that "+root+" is readable by you")
	}
	var out []Finding
	if len(foreign) > 0 {
		out = append(out, Finding{State: Fail, Detail: fmt.Sprintf("%s belonging to another user: %s", plural.Count(len(foreign), "entry", "entries"), list(foreign)),
			Fix: "chown -R $(id -u) " + quote(root) + " (as root), or remove them"})
	}
	if len(open) > 0 {
		out = append(out, Finding{State: Fail, Detail: fmt.Sprintf("%s open to group or others: %s", plural.Count(len(open), "entry", "entries"), list(open)),
			Fix: "chmod -R go-rwx " + quote(root)})
	}
	if out == nil {
		out = one("", OK, plural.Count(n-1, "entry", "entries")+", all yours and private", "")
	}
	return out
}

func checkConfig(_ context.Context, e *Env) []Finding {
	path := e.Home.Config()
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return one("", OK, "no config.toml: the built-in defaults apply", "")
	}
	if _, err := e.Home.LoadConfig(e.Getenv); err != nil {
		return one("", Fail, err.Error(), "edit "+quote(path)+" (the keys are in README.md and spec/cli.md); the daemon will not start until it loads")
	}
	return one("", OK, path+" loads", "")
}

// checkDaemon tells a live daemon from a dead one: the lock is held for
// exactly as long as the daemon lives, the socket file may outlive it.
func checkDaemon(_ context.Context, e *Env) []Finding {
	h := e.Home
	_, serr := os.Lstat(h.Socket())
	if !h.DaemonRunning() {
		if serr == nil {
			return one("", Fail, "a socket is left at "+h.Socket()+" but no daemon holds the home: the daemon died without stopping (crashed or killed)",
				"cbth daemon restart: a new daemon replaces the socket, replays the log and fails closed any task the dead one left running")
		}
		return one("", OK, "not running; the first cbth command starts it", "")
	}
	c, err := ipc.Dial(h.Socket(), e.Version)
	if err != nil {
		return one("", Fail, fmt.Sprintf("a daemon holds the home but does not answer on %s: %v", h.Socket(), err),
			"cbth daemon restart (it signals the daemon and starts a new one)")
	}
	defer c.Close()
	st, err := api.DaemonStatus.Call(c, api.Empty{})
	if err != nil {
		if errs.CodeOf(err) == errs.EVERSION {
			return one("", Fail, fmt.Sprintf("the daemon is cbth %s (protocol %d); this cbth is %s (protocol %d) and cannot use it", c.DaemonVersion, c.DaemonProto, e.Version, e.Proto),
				"cbth daemon restart: hands the home over to this version without losing work")
		}
		return one("", Fail, "the daemon does not answer its status: "+err.Error(), "cbth daemon restart")
	}
	detail := fmt.Sprintf("pid %d, cbth %s (protocol %d), up %s, log head seq %d, projections %d behind, %s running",
		st.PID, st.Version, st.Protocol, (time.Duration(st.UptimeSeconds) * time.Second).String(), st.LogHeadSeq, st.ProjectionLag, plural.Count(st.RunningTasks, "task", "tasks"))
	if st.Protocol != e.Proto {
		return one("", Fail, detail+"; this cbth speaks protocol "+fmt.Sprint(e.Proto), "cbth daemon restart")
	}
	e.status = &st
	if st.Version != e.Version {
		return one("", Warn, detail+"; this cbth is "+e.Version, "cbth daemon restart, to run this version's daemon")
	}
	return one("", OK, detail, "")
}

// checkLog verifies the log: through the daemon when one of this
// protocol runs, else by opening the file read-only.
func checkLog(ctx context.Context, e *Env) []Finding {
	db := e.Home.DB()
	if _, err := os.Stat(db); errors.Is(err, fs.ErrNotExist) {
		return one("", OK, "no log yet", "")
	}
	var rep engine.Report
	var err error
	switch {
	case e.status != nil:
		var c *ipc.Client
		if c, err = ipc.Dial(e.Home.Socket(), e.Version); err == nil {
			rep, err = api.EventsVerify.Call(c, api.Empty{})
			c.Close()
		}
	case e.Home.DaemonRunning():
		return one("", Skip, "a daemon holds the log but cannot be asked to verify it (see the daemon check)", "")
	default:
		rep, err = engine.VerifyFile(ctx, projections.Store{}, db, 2*time.Second)
	}
	if err != nil {
		return one("", Fail, "cannot verify the log: "+err.Error(), "cbth events verify, for the full error; see spec/engine.md")
	}
	if !rep.OK() {
		p := rep.Problems[0]
		return one("", Fail, fmt.Sprintf("%s in %s; the first: seq %d %s %s", plural.Count(len(rep.Problems), "problem", "problems"), plural.Count(rep.Events, "event", "events"), p.Seq, p.Code, p.Message),
			"cbth events verify lists them all; spec/engine.md says what each means")
	}
	return one("", OK, fmt.Sprintf("%s, head seq %d: hash chain, transitions and projections verify", plural.Count(rep.Events, "event", "events"), rep.Head), "")
}

// checkRelay reports the Desktop transcript-relay scanners, asked of the
// daemon: a degraded one stops a sandboxed bridge's writeback until it is
// rebound, so it fails with its reason code.
func checkRelay(_ context.Context, e *Env) []Finding {
	if e.status == nil {
		return one("", Skip, "no daemon of this protocol to ask (see the daemon check)", "")
	}
	c, err := ipc.Dial(e.Home.Socket(), e.Version)
	if err != nil {
		return one("", Fail, "cannot ask the daemon: "+err.Error(), "cbth daemon restart")
	}
	defer c.Close()
	v, err := api.DesktopInstallation.Call(c, api.InstallationArgs{})
	if err != nil {
		return one("", Fail, "cannot read the Desktop installation state: "+err.Error(), "")
	}
	if len(v.RelayScanners) == 0 {
		return one("", OK, "no relay scanner bound", "")
	}
	var out []Finding
	reading := 0
	for _, r := range v.RelayScanners {
		if r.State != query.ScannerDegraded {
			reading++
			continue
		}
		detail, fix := "its relay lines are not read until it is rebound", "<the bridge thread's current rollout file>"
		if r.DegradedReason == events.RelayScannerRecordTooLong {
			// It reads on; a rebind to the same file acknowledges the skip.
			detail, fix = "rebinding it to the same file acknowledges that", quote(r.RolloutPath)
		}
		out = append(out, Finding{State: Fail,
			Detail: fmt.Sprintf("the relay scanner of bridge thread %s is degraded (%s): %s; %s", r.BridgeThreadID, r.DegradedReason, r.DegradedDetail, detail),
			Fix:    fmt.Sprintf("cbth desktop relay scanner bind --bridge-thread-id %s --rollout-path %s", quote(r.BridgeThreadID), fix)})
	}
	if reading > 0 {
		out = append(out, Finding{State: OK, Detail: plural.Count(reading, "relay scanner", "relay scanners") + " reading"})
	}
	return out
}

// checkQueue reports Desktop's queue writeback transport (experimental),
// asked of the daemon: whether its live validation holds for this cbth
// and the daemon's Codex home, is in use, waits for its drain, or failed.
func checkQueue(_ context.Context, e *Env) []Finding {
	if e.status == nil {
		return one("", Skip, "no daemon of this protocol to ask (see the daemon check)", "")
	}
	c, err := ipc.Dial(e.Home.Socket(), e.Version)
	if err != nil {
		return one("", Fail, "cannot ask the daemon: "+err.Error(), "cbth daemon restart")
	}
	defer c.Close()
	v, err := api.DesktopInstallation.Call(c, api.InstallationArgs{})
	if err != nil {
		return one("", Fail, "cannot read the Desktop installation state: "+err.Error(), "")
	}
	const experimental = " (experimental: proven against the Codex CLI's managed daemon only, not yet on Codex Desktop)"
	validate := func(thread string) string {
		if thread == "" {
			thread = "<a bound thread, open and idle in Codex Desktop>"
		}
		return "cbth desktop validate-queue --source-thread-id " + quote(thread) + " --wait"
	}
	q, open, failed := v.QueueValidation, v.QueueValidationOpen, v.QueueValidationFailure
	switch {
	case open != nil:
		return one("", Warn, fmt.Sprintf("a live validation waits until %s for thread %s to drain item %s from Codex's queue%s",
			open.Deadline.Local().Format(time.RFC3339), open.ThreadID, open.QueuedItemID, experimental), "")
	case q != nil && q.Current && v.WritebackTransport == "queue":
		return one("", OK, fmt.Sprintf("validated and in use: thread %s drained item %s at %s, in %s%s", q.ThreadID, q.QueuedItemID,
			q.ValidatedAt.Local().Format(time.RFC3339), q.CodexHome, experimental), "")
	case q != nil && q.Current:
		return one("", OK, fmt.Sprintf("validated, not in use: the writeback transport in use is %s%s", v.WritebackTransport, experimental), "")
	case q != nil:
		return one("", Fail, fmt.Sprintf("validated in %s for fingerprint %s, which this daemon (%s, fingerprint %s) is not: nothing is handed to Codex's queue",
			q.CodexHome, q.Fingerprint, v.CodexHome, v.ObservedFingerprint), validate(q.ThreadID))
	case failed != nil:
		return one("", Warn, fmt.Sprintf("the last live validation failed (%s) at %s: %s; nothing is handed to Codex's queue%s", failed.Reason,
			failed.FailedAt.Local().Format(time.RFC3339), failed.Detail, experimental), validate(failed.ThreadID))
	}
	return one("", OK, "not validated: nothing is handed to Codex's queue"+experimental, "")
}

// checkRunner checks the CortexFS runner: present where cbth looks for it,
// and named by every object's #! line as an executable file.
func checkRunner(ctx context.Context, e *Env) []Finding {
	const install = "cbth install --prefix ~/.local (cbth, ctx and " + runner.ProgramName + " in ~/.local/bin)"
	run := findBeside(e, runner.ProgramName)
	objs, bad, err := shebangs(ctx, e.CtxRoot)
	switch {
	case err != nil:
		return one("", Fail, "cannot read the object tree "+e.CtxRoot+": "+err.Error(), "check "+quote(e.CtxRoot))
	case len(bad) > 0:
		paths := slices.Sorted(maps.Keys(bad))
		return one("", Fail, fmt.Sprintf("objects in %s whose #! line names a missing or non-executable runner: %d of %d; the runners: %s",
			e.CtxRoot, sum(bad), objs, strings.Join(paths, ", ")),
			install+"; or rewrite the objects' #! lines with cbth ctx init --runner PATH")
	case objs == 0 && run == "":
		return one("", Warn, "no "+runner.ProgramName+" beside cbth or on PATH, and no object tree yet", install)
	case objs == 0:
		return one("", OK, "runner "+run+"; no object tree yet (cbth ctx init creates it)", "")
	}
	return one("", OK, fmt.Sprintf("%s in %s, each naming an executable runner", plural.Count(objs, "object", "objects"), e.CtxRoot), "")
}

// shebangs reads the #! line of every object file of a tree: how many
// there are, and how many name each runner that cannot run.
func shebangs(ctx context.Context, root string) (int, map[string]int, error) {
	bad := map[string]int{}
	n := 0
	for _, kind := range []string{object.KindModel, object.KindAgent, object.KindTool} {
		dir := filepath.Join(root, kind)
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if ctx.Err() != nil {
				return filepath.SkipAll
			}
			if d.IsDir() && strings.HasSuffix(d.Name(), ".d") {
				return filepath.SkipDir
			}
			if !d.Type().IsRegular() {
				return nil
			}
			line, err := firstLine(p)
			if err != nil || !strings.HasPrefix(line, "#!") {
				return nil
			}
			n++
			if f := strings.Fields(line[2:]); len(f) == 0 || !executable(f[0]) {
				bad[strings.Join(f, " ")]++
			}
			return nil
		})
		if err != nil {
			return n, bad, err
		}
	}
	return n, bad, nil
}

func firstLine(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 512)
	line, err := r.ReadString('\n')
	if err != nil && line == "" {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// networkModels lists the tree's models that run through a network
// driver, and the credential each one's provider is read from.
func networkModels(root string) ([]object.Object, error) {
	if _, err := os.Stat(filepath.Join(root, object.KindModel)); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	set, err := tree.Load(root)
	if err != nil {
		return nil, err
	}
	var out []object.Object
	for _, o := range set.Objects {
		if o.Kind != object.KindModel {
			continue
		}
		for _, list := range o.Driver {
			if slices.ContainsFunc(list, func(d string) bool { return slices.Contains(provider.Names, d) }) {
				out = append(out, o)
				break
			}
		}
	}
	return out, nil
}

func checkProviders(_ context.Context, e *Env) []Finding {
	models, err := networkModels(e.CtxRoot)
	if err != nil {
		return one("", Fail, "cannot read the object tree: "+err.Error(), "check "+quote(e.CtxRoot))
	}
	p, err := e.locator().Locate()
	switch {
	case err == nil:
		return one("", OK, provider.HelperName+" at "+p, "")
	case len(models) == 0:
		return one("", OK, provider.HelperName+" is not installed; only network models need it, and none is configured", "")
	}
	return one("", Fail, fmt.Sprintf("%s configured, but %v", plural.Count(len(models), "network model", "network models"), err),
		"cbth install --prefix DIR puts it beside cbth; or go build -o \"$(dirname \"$(command -v cbth)\")/"+provider.HelperName+"\" ./cmd/"+provider.HelperName)
}

// checkConfinement says whether shell.exec and the provider helper run
// confined here (spec/cortexfs.md, "Confinement"): a warning, not a
// failure, where the system lacks the means: they still run, unconfined.
func checkConfinement(_ context.Context, _ *Env) []Finding { return confinement(confine.Check()) }

// confinement is the finding for what st says this system confines.
func confinement(st confine.Status) []Finding {
	switch {
	case !st.Available:
		return one("", Warn, "shell.exec and the provider helper run UNCONFINED: they can read and write anything you can ("+st.Mechanism+"); "+st.Summary(),
			"on Linux, use a kernel with Landlock enabled (5.13 or later, landlock in the lsm= boot parameter); until then give agents shell.exec only in roots you would let them leave")
	case len(st.Unconfined()) > 0:
		var off []string
		for _, r := range st.Unconfined() {
			off = append(off, r.Name)
		}
		return one("", Warn, "shell.exec and the provider helper run confined only in part: "+st.Summary(),
			"this kernel cannot keep them from "+strings.Join(off, " and ")+": give agents shell.exec only where that is acceptable, or use a kernel with seccomp and Landlock ABI 6 or later (Linux 6.12)")
	}
	return one("", OK, "shell.exec and the provider helper run confined (the agent root read-write, the system's directories read-only, no unix socket): "+st.Summary(), "")
}

// checkCredentials asks the provider helper, which resolves credentials
// for every model call (the keychain client lives there, not in cbth),
// where each configured provider's credential is. It is never shown.
func checkCredentials(ctx context.Context, e *Env) []Finding {
	models, err := networkModels(e.CtxRoot)
	if err != nil {
		return one("", Skip, "cannot read the object tree: "+err.Error(), "")
	}
	if len(models) == 0 {
		return one("", OK, "no network model is configured, so no credential is needed", "")
	}
	helper, err := e.locator().Locate()
	if err != nil {
		return one("", Skip, provider.HelperName+" reads the credentials and is not installed (see the providers check)", "")
	}
	if abs, err := filepath.Abs(helper); err == nil {
		helper = abs // it runs from "/"
	}
	seen := map[string]bool{}
	var out []Finding
	for _, o := range models {
		id, err := name.ParseModel(o.Path)
		if err != nil {
			continue
		}
		args := []string{"--check-credential", id.Provider}
		for _, kv := range o.Defaults {
			if kv.Key == "api_key_env" && kv.Value != "" {
				args = append(args, kv.Value)
			}
		}
		if key := strings.Join(args, "\x00"); seen[key] {
			continue
		} else {
			seen[key] = true
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		override := ""
		if len(args) > 2 {
			override = args[2]
		}
		// As for a model call: the helper's own environment, from "/",
		// confined where the system can.
		env := provider.HelperEnv(e.LookupEnv, id.Provider, override)
		cmd, err := confine.Command(cctx, provider.HelperPolicy(e.LookupEnv, helper), nil, append([]string{helper}, args...), env)
		if err != nil {
			cancel()
			out = append(out, Finding{ID: "credentials." + id.Provider, State: Skip, Detail: err.Error()})
			continue
		}
		cmd.Dir = "/"
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
		cancel()
		f := Finding{ID: "credentials." + id.Provider}
		if err != nil {
			f.State, f.Detail = Fail, strings.TrimSpace(stderr.String())
			if f.Detail == "" {
				f.Detail = err.Error()
			}
			f.Fix = "set the variable it names where cbth runs, or add the keychain item it names (spec/cortexfs.md, Credentials)"
		} else {
			f.State, f.Detail = OK, "found for "+id.Provider+" in "+strings.TrimSpace(stdout.String())+" (not shown)"
		}
		out = append(out, f)
	}
	return out
}

// locator finds the provider helper as a model call does: $CBTH_PROVIDERS,
// beside this binary, on PATH.
func (e *Env) locator() provider.Locator {
	return provider.Locator{LookupEnv: e.LookupEnv, Executable: func() (string, error) { return e.Executable, nil }, LookPath: lookPath(e)}
}

// findBeside looks for a program beside this binary, then on PATH.
func findBeside(e *Env, prog string) string {
	if e.Executable != "" {
		if p := filepath.Join(filepath.Dir(e.Executable), prog); executable(p) {
			return p
		}
	}
	if p, err := lookPath(e)(prog); err == nil {
		return p
	}
	return ""
}

// lookPath searches the PATH of e's environment.
func lookPath(e *Env) func(string) (string, error) {
	return func(prog string) (string, error) {
		for _, dir := range filepath.SplitList(e.Getenv("PATH")) {
			if p := filepath.Join(dir, prog); dir != "" && executable(p) {
				return p, nil
			}
		}
		return "", fs.ErrNotExist
	}
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func owner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

func list(items []string) string {
	if len(items) > 5 {
		return strings.Join(items[:5], ", ") + fmt.Sprintf(" and %d more", len(items)-5)
	}
	return strings.Join(items, ", ")
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// quote quotes a path for a shell command line.
func quote(s string) string {
	if !strings.ContainsAny(s, " \t\n'\"\\$`;&|<>()*?[]{}~#!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// checkCodex finds the Codex CLI the cli target runs (codex_binary, else
// codex on PATH) and asks its version. Only the cli target needs it, so
// its absence is a warning. A running daemon looks codex_binary up on its
// own PATH, the one it started with, which may lack a Codex this shell
// finds: its view (daemon status) is the one that counts, and the one
// reported; this shell's only when no daemon answers. The daemon proves
// the app-server's capabilities itself when it starts it
// (adapters/codex/probe).
func checkCodex(ctx context.Context, e *Env) []Finding {
	if e.status != nil && e.status.Codex != nil {
		return daemonCodex(ctx, e, *e.status.Codex)
	}
	where := " (as this shell finds it; no daemon to ask)"
	if e.status != nil { // a daemon of an older cbth answers without it
		where = " (as this shell finds it; the running daemon does not report its own)"
	}
	bin := "codex"
	if c, err := e.Home.LoadConfig(e.Getenv); err == nil {
		bin = c.CodexBinaryName()
	}
	path := bin
	if !strings.Contains(bin, "/") {
		p, err := lookPath(e)(bin)
		if err != nil {
			return one("", Warn, bin+" is not on PATH"+where+": the cli target (cbth cli run, jobs with --target cli) needs the Codex CLI",
				"install it (npm install -g @openai/codex), or name it with codex_binary in "+quote(e.Home.Config()))
		}
		path = p
	} else if !executable(bin) {
		return one("", Fail, "codex_binary "+bin+" does not exist or is not executable", "fix codex_binary in "+quote(e.Home.Config()))
	}
	return codexVersion(ctx, path, where)
}

// daemonCodex reports codex_binary as the running daemon resolved it.
// When the daemon cannot find it but this shell can, the cli target
// fails although the user's Codex works: that is a failure, with the two
// ways out.
func daemonCodex(ctx context.Context, e *Env, d api.CodexLookup) []Finding {
	const where = " (as the running daemon sees it)"
	if d.Error == "" {
		return codexVersion(ctx, d.Path, where)
	}
	if strings.Contains(d.Binary, "/") {
		return one("", Fail, "codex_binary "+d.Binary+" cannot be run"+where+": "+d.Error,
			"fix codex_binary in "+quote(e.Home.Config())+", then cbth daemon restart (the daemon reads its config when it starts)")
	}
	mine, err := lookPath(e)(d.Binary)
	if err != nil {
		return one("", Warn, d.Binary+" is not on the daemon's PATH nor on this shell's"+where+": the cli target (cbth cli run, jobs with --target cli) needs the Codex CLI",
			"install it (npm install -g @openai/codex), or name it with codex_binary in "+quote(e.Home.Config())+", then cbth daemon restart")
	}
	return one("", Fail, fmt.Sprintf("%s is not on the daemon's PATH (the PATH of the shell or service manager that started it)%s, so cbth cli run fails; this shell finds %s", d.Binary, where, mine),
		fmt.Sprintf("codex_binary = %q in %s, then cbth daemon restart; or, for a daemon no service runs, cbth daemon restart from this shell", mine, quote(e.Home.Config())))
}

// codexVersion asks the Codex at path for its version.
func codexVersion(ctx context.Context, path, where string) []Finding {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, path, "--version").Output()
	f := strings.Fields(string(out))
	if err != nil || len(f) == 0 {
		return one("", Fail, fmt.Sprintf("%s --version failed%s: %v", path, where, err), "reinstall the Codex CLI, or name a working one with codex_binary")
	}
	return one("", OK, "codex "+f[len(f)-1]+" at "+path+where, "")
}

// checkMCP says whether Codex will load cbth's MCP server for the agent
// (spec/mcp.md) in the Codex home cbth's app-server uses: its entry in
// config.toml, the approvals of the tools that act, the skill. A session
// under `cbth cli run` gets the server anyway, so its absence is a
// warning; an entry Codex would run wrongly is a failure.
func checkMCP(_ context.Context, e *Env) []Finding {
	c, err := e.Home.LoadConfig(e.Getenv)
	if err != nil {
		return one("", Skip, "the configuration does not load (see config)", "")
	}
	codexHome, err := c.CodexHomeDir(e.Getenv)
	if err != nil {
		return one("", Skip, err.Error(), "")
	}
	st := mcpconfig.Inspect(filepath.Join(codexHome, "config.toml"), mcpconfig.Entry{Home: e.Home.Root, Approve: mcpconfig.DefaultApproved()})
	switch {
	case st.Command == "" && len(st.Problems) > 0:
		return one("", Warn, "Codex sessions started outside cbth cli run will not have cbth's tools: "+st.Problems[0],
			"cbth mcp install")
	case len(st.Problems) > 0:
		return one("", Fail, "Codex will not run cbth's MCP server as it should: "+strings.Join(st.Problems, "; "), "cbth mcp install")
	}
	detail := fmt.Sprintf("Codex (%s) loads cbth's MCP server: %s for CBTH_HOME %s; approved: %s", codexHome, st.Command, st.Home, strings.Join(st.Approved, ", "))
	var asks []string
	for _, t := range mcpconfig.ApprovalTools {
		if _, opt := mcpconfig.OptIn[t]; opt && !slices.Contains(st.Approved, t) {
			asks = append(asks, t)
		}
	}
	if len(asks) > 0 {
		detail += fmt.Sprintf("; Codex asks before %s (refused under approval_policy = \"never\" unless you run cbth mcp install --approve %s)", strings.Join(asks, ", "), strings.Join(asks, ","))
	}
	if slices.Contains(st.Approved, "task_run") {
		detail += "; task_run is pre-approved: what your [mcp] rules allow runs outside Codex's sandbox without a prompt"
	}
	if _, err := os.Stat(mcpconfig.SkillPath(codexHome)); err != nil {
		return one("", Warn, detail+"; the cbth skill is missing", "cbth mcp install")
	}
	return one("", OK, detail+"; the cbth skill is installed", "")
}

// checkCodexDaemon checks the Codex daemon a plain `codex` runs, through
// which results reach threads no `cbth cli run` holds (spec/codex-cli.md
// section 17): found, its socket safe to use, its version, and, as the
// running cbth daemon follows it, whether deliveries can go. It connects
// and asks the version, and records nothing anywhere.
func checkCodexDaemon(ctx context.Context, e *Env) []Finding {
	c, err := e.Home.LoadConfig(e.Getenv)
	if err != nil {
		return one("", Skip, "the configuration does not load (see config)", "")
	}
	if !c.CLI.CodexDaemon {
		return one("", Skip, "[cli] codex_daemon is off: results reach a Codex thread only under cbth cli run", "")
	}
	codexHome, err := c.CodexHomeDir(e.Getenv)
	if err != nil {
		return one("", Skip, err.Error(), "")
	}
	sock := sessions.DaemonSocket(codexHome)
	if _, err := sessions.CheckDaemonSocket(sock, os.Getuid()); err != nil {
		if errs.CodeOf(err) == errs.EHOSTDOWN {
			return one("", Warn, "Codex's daemon for "+codexHome+" does not run: "+err.Error()+"; results for threads outside cbth cli run wait until it does",
				"start Codex as usual (codex, or codex resume THREAD); plain codex starts its daemon")
		}
		return one("", Fail, "cbth will not use Codex's daemon for "+codexHome+": "+err.Error(),
			"let Codex make its socket again: codex app-server daemon restart (and check who else can write "+filepath.Dir(sock)+")")
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	t, peer, err := appserver.DialUnix(cctx, sock)
	if err != nil {
		return one("", Fail, "Codex's daemon socket "+sock+" does not answer: "+err.Error(), "codex app-server daemon restart")
	}
	client := appserver.New(t, appserver.Options{})
	defer client.Close()
	init, err := client.Initialize(cctx, appserver.ClientInfo{Name: "cbth-doctor", Version: e.Version}, appserver.Capabilities{})
	if err != nil {
		return one("", Fail, "Codex's daemon (pid "+fmt.Sprint(peer.PID)+") does not initialize: "+err.Error(), "codex app-server daemon restart")
	}
	detail := fmt.Sprintf("Codex's daemon for %s: pid %d, %s, socket %s", codexHome, peer.PID, init.UserAgent, sock)
	if e.status == nil || e.status.CodexDaemon == nil {
		return one("", OK, detail+"; cbth connects to it on the first delivery (no cbth daemon runs to say more)", "")
	}
	switch d := e.status.CodexDaemon; {
	case d.State == api.CodexDaemonRunning && d.Deliveries:
		return one("", OK, detail+"; the running cbth daemon delivers through it", "")
	case d.State == api.CodexDaemonFound || d.State == api.CodexDaemonNotRunning:
		return one("", OK, detail+"; the running cbth daemon connects on the first delivery", "")
	default:
		return one("", Fail, detail+"; the running cbth daemon does not deliver through it: "+d.Error,
			"see cbth daemon status --json (codex_daemon); a failed probe names what the daemon lacks (update Codex: npm i -g @openai/codex, then codex app-server daemon restart)")
	}
}
