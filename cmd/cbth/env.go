package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	cortexcli "github.com/cbth-dev/cbth/adapters/cortexfs/cli"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Env is what every command runs with: where output goes, which home, and
// how to reach the daemon.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	JSON           bool
	HomeFlag       string
}

// Home resolves the home: --home, then $CBTH_HOME, then ~/.cbth.
func (e *Env) Home() (home.Home, error) {
	if e.HomeFlag != "" {
		abs, err := filepath.Abs(e.HomeFlag)
		if err != nil {
			return home.Home{}, errs.Wrap(errs.EINVAL, err, "--home")
		}
		return home.Home{Root: abs}, nil
	}
	return home.Resolve(e.Getenv)
}

// Client connects to the daemon, starting it when it is absent unless
// CBTH_NO_AUTOSTART=1.
func (e *Env) Client() (*ipc.Client, error) {
	h, err := e.Home()
	if err != nil {
		return nil, err
	}
	timeout := e.startTimeout()
	var start func() error
	inCodex := e.Getenv("CODEX_THREAD_ID") != ""
	if e.Getenv("CBTH_NO_AUTOSTART") != "1" && !inCodex {
		start = func() error { return e.spawnDaemon(h, timeout) }
	}
	if e.Getenv("CODEX_SANDBOX_NETWORK_DISABLED") == "1" {
		// Codex's sandbox refuses every connect() without network, the
		// daemon's unix socket included, and a daemon started from in
		// here could not write its home: say so at once.
		if c, err := ipc.Dial(h.Socket(), Version); err == nil {
			return c, nil
		}
		return nil, sandboxError()
	}
	c, err := ipc.Connect(context.Background(), h.Socket(), Version, start, timeout)
	if err != nil {
		if errors.Is(err, syscall.EPERM) {
			return nil, sandboxError()
		}
		if inCodex && ipc.Absent(err) {
			// Codex ends what a tool call started when the call ends (its
			// sandbox is a process namespace of its own), so a daemon
			// started from here would take the jobs down with it.
			return nil, errs.Wrap(errs.EHOSTDOWN, err, "no cbth daemon runs, and this command runs in an agent's shell inside Codex (CODEX_THREAD_ID is set), where a daemon it started would end with the command: "+
				"start it outside Codex (any cbth command in your own terminal does, e.g. cbth daemon status), or use cbth's MCP tools (mcp__cbth), whose server Codex runs outside the sandbox and which start the daemon themselves")
		}
		if errs.CodeOf(err) == errs.EHOSTDOWN && h.DaemonRunning() {
			return nil, errs.Wrap(errs.EHOSTDOWN, err, "a daemon holds the lock of %s but does not answer on %s (`cbth daemon stop` stops it)", h.Root, h.Socket())
		}
		return nil, err
	}
	return c, nil
}

// sandboxError is why a command in an agent's shell inside Codex's
// sandbox cannot reach the daemon, and the ways through.
func sandboxError() error {
	return errs.New(errs.ESANDBOX, "cbth cannot reach its daemon from inside Codex's sandbox: this shell has no network access, and the sandbox refuses every socket connection, the daemon's local socket included. "+
		"Two ways through: use cbth's MCP tools (mcp__cbth: task_run, job_submit), which Codex runs outside the sandbox (cbth mcp install adds them to Codex), "+
		"or give the workspace network access ([sandbox_workspace_write] network_access = true in Codex's config.toml)")
}

// threadID is the thread a command is for: --thread-id, else the Codex
// thread whose shell runs it (Codex exports CODEX_THREAD_ID to every
// shell tool call), said on stderr so a script sees which was taken.
func (e *Env) threadID(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if t := e.Getenv("CODEX_THREAD_ID"); t != "" {
		fmt.Fprintf(e.Stderr, "cbth: thread %s (from CODEX_THREAD_ID)\n", t)
		return t, nil
	}
	return "", errs.New(errs.EINVAL, "no thread: give --thread-id (in a Codex thread's shell, CODEX_THREAD_ID gives it)")
}

// startTimeout bounds the wait for a starting daemon: CBTH_START_TIMEOUT,
// else 10 s.
func (e *Env) startTimeout() time.Duration {
	if v := e.Getenv("CBTH_START_TIMEOUT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return d
		}
	}
	return 10 * time.Second
}

// spawnDaemon starts `cbth daemon run` detached (its own session, no
// terminal; it logs to $CBTH_HOME/log/daemon.log) and waits, at most
// timeout, until it serves or says why it cannot. Until it serves, the
// daemon's stdout is a pipe to this process: a daemon that cannot start
// prints its error there as JSON and exits, and one that serves points
// its stdout at its log, which ends the pipe. So the reason a daemon did
// not start is this command's error, at once. If several clients race,
// every spawned daemon but the lock holder reports already_running.
func (e *Env) spawnDaemon(h home.Home, timeout time.Duration) error {
	if err := h.Ensure(); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(exe, "--home", h.Root, "daemon", "run", "--quiet", "--json")
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		return err
	}
	// Reaped when it exits: a long-lived client (cbth mcp serve, cli run,
	// watch) would otherwise keep a killed daemon as a zombie holding its
	// pid. A short command exits first, and init reaps it.
	go func() { _ = cmd.Wait() }()
	report := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
		report <- b
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case b := <-report:
		return startFailure(b)
	case <-t.C:
		return nil // the wait for the socket reports the timeout
	}
}

// startFailure reads what a starting daemon printed: nothing once it
// serves, an outcome when another daemon holds the lock, or the error it
// stopped on.
func startFailure(out []byte) error {
	var doc struct {
		Error *struct {
			Code    errs.Code `json:"code"`
			Message string    `json:"message"`
		} `json:"error"`
	}
	if len(bytes.TrimSpace(out)) == 0 || json.Unmarshal(out, &doc) != nil || doc.Error == nil {
		return nil
	}
	return &errs.Error{Code: doc.Error.Code, Message: "the daemon could not start: " + doc.Error.Message}
}

// call runs one daemon operation, starting the daemon when it is absent.
// A daemon of another protocol refuses it: an older idle one is replaced
// and the call made again, otherwise the error names the command to run.
// A daemon of this protocol but an older version serves it, and is then
// replaced if idle, else warned about.
func call[Req, Rep any](e *Env, op api.Op[Req, Rep], req Req) (Rep, error) {
	rep, c, err := callOnce(e, op, req)
	if c == nil {
		return rep, err
	}
	dv, dp := c.DaemonVersion, c.DaemonProto
	if errs.CodeOf(err) == errs.EVERSION {
		if !e.replaceIfIdleOlder(dv, dp) {
			return rep, versionError(dv, dp)
		}
		rep, _, err = callOnce(e, op, req)
		return rep, err
	}
	if dv != "" && dv != Version && !op.Passive && !e.replaceIfIdleOlder(dv, dp) {
		hint := restartHint
		if !olderThan(dv) {
			hint = "use the newer cbth binary"
		}
		fmt.Fprintf(e.Stderr, "cbth: warning: the daemon runs cbth %s, this client is %s; %s\n", dv, Version, hint)
	}
	return rep, err
}

// callOnce makes one call on a fresh connection, which it closes; the
// client is returned for what the daemon reported (nil if none was made).
func callOnce[Req, Rep any](e *Env, op api.Op[Req, Rep], req Req) (Rep, *ipc.Client, error) {
	c, err := e.Client()
	if err != nil {
		var zero Rep
		return zero, nil, err
	}
	defer c.Close()
	rep, err := op.Call(c, req)
	return rep, c, err
}

// emit prints v as one JSON document under --json, else runs human.
func (e *Env) emit(v any, human func(w io.Writer)) error {
	if e.JSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	human(e.Stdout)
	return nil
}

// boolFlag parses a true|false flag value; "" means not given.
func boolFlag(name, v string) (*bool, error) {
	if v == "" {
		return nil, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil || (v != "true" && v != "false") {
		return nil, errs.New(errs.EINVAL, "--%s must be true or false, not %q", name, v)
	}
	return &b, nil
}

// cortexEnv is the environment of the CortexFS commands, derived from the
// same home and writers as every other command.
func cortexEnv(e *Env) cortexcli.Env {
	lookup := func(k string) (string, bool) {
		v := e.Getenv(k)
		return v, v != ""
	}
	userHome, _ := os.UserHomeDir()
	c := cortexcli.DefaultEnv(lookup, userHome)
	if h, err := e.Home(); err == nil {
		c.CBTHHome = h.Root
		if e.Getenv("CTX_ROOT") == "" {
			c.CtxRoot = h.CtxRoot()
		}
	}
	c.Stdout, c.Stderr, c.JSON = e.Stdout, e.Stderr, e.JSON
	c.Store = daemonTrees{e}
	return c
}

// daemonTrees registers tree changes with the daemon, which records them
// as events and materializes the tree as their projection.
type daemonTrees struct{ e *Env }

func (d daemonTrees) Load(root string) (tree.Set, bool, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return tree.Set{}, false, errs.Wrap(errs.EINVAL, err, "tree root")
	}
	doc, err := call(d.e, api.CtxTreeLoad, api.TreeArgs{Root: abs})
	return doc.Set, doc.Exists, err
}

// Hold implements cortexcli.SocketHost: ctx.serve on a connection kept
// open (attached) until release; the connection ending before that is
// the daemon gone.
func (d daemonTrees) Hold(root, object string) (string, <-chan struct{}, func() error, func(), error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", nil, nil, nil, errs.Wrap(errs.EINVAL, err, "tree root")
	}
	c, err := d.e.Client()
	if err != nil {
		return "", nil, nil, nil, err
	}
	rep, err := api.CtxServe.Call(c, api.CtxServeArgs{Root: abs, Object: object})
	if err != nil {
		c.Close()
		return "", nil, nil, nil, err
	}
	gone := make(chan struct{})
	var why error
	go func() {
		why = c.Wait()
		close(gone)
	}()
	return rep.Socket, gone, func() error { <-gone; return why }, func() { c.Close() }, nil
}

func (d daemonTrees) Save(root string, set tree.Set) error {
	abs, err := filepath.Abs(root)
	if err != nil {
		return errs.Wrap(errs.EINVAL, err, "tree root")
	}
	_, err = call(d.e, api.CtxTreeSave, api.TreeArgs{Root: abs, Set: set})
	return err
}
