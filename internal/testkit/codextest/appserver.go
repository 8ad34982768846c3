package codextest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
	"github.com/cbth-dev/cbth/internal/testkit/proctest"
)

// Guard bounds every wait on Codex in a test: a hang fails the test
// instead of stalling the suite. Tests assert on outcomes, never on how
// long they took.
const Guard = 60 * time.Second

// Context is a context that ends after Guard or with the test.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Guard)
	t.Cleanup(cancel)
	return ctx
}

// ClientInfo is what test clients call themselves.
var ClientInfo = appserver.ClientInfo{Name: "cbth-test", Version: "0.0.0"}

// Rig is a real app-server of the pinned Codex on a private CODEX_HOME,
// its model a fake on loopback.
type Rig struct {
	Codex string // the native binary
	Home  string // CODEX_HOME
	Cwd   string // a project directory for threads
	Model *fakeprovider.Server
	Sup   *supervisor.Supervisor
	Inst  *supervisor.Instance
	Log   string // the app-server's stdout and stderr
}

// Config is a supervisor configuration for a test: the pinned binary, a
// private CODEX_HOME wired to model, a socket directory under the test's
// temporary directory, the app-server's output in a log file.
func SupervisorConfig(t testing.TB, model *fakeprovider.Server) (supervisor.Config, string) {
	t.Helper()
	bin := Binary(t)
	home := Home(t, model.BaseURL())
	dir := t.TempDir()
	logPath := filepath.Join(dir, "app-server.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	cwd := filepath.Join(dir, "project")
	if err := os.Mkdir(cwd, 0o700); err != nil {
		t.Fatal(err)
	}
	return supervisor.Config{
		Codex:        bin,
		CodexHome:    home,
		Dir:          filepath.Join(dir, "run"),
		Cwd:          cwd,
		Env:          Env(t, home),
		Log:          logf,
		ClientInfo:   ClientInfo,
		Capabilities: appserver.Capabilities{ExperimentalAPI: true},
		Clock:        engine.SystemClock{},
		StartTimeout: 60 * time.Second,
	}, logPath
}

// StartRig starts a fake model and an app-server on it. Its cleanup stops
// the app-server and fails the test if any process of its group is left.
func StartRig(t testing.TB) *Rig {
	t.Helper()
	model := fakeprovider.Start(fakeprovider.Codex, "")
	t.Cleanup(model.Close)
	cfg, logPath := SupervisorConfig(t, model)
	r := StartWith(t, cfg, logPath)
	r.Model = model
	return r
}

// StartWith starts an app-server as cfg says, its output in logPath
// ("" when cfg sends it elsewhere), with StartRig's cleanup; the rig has
// no model of its own.
func StartWith(t testing.TB, cfg supervisor.Config, logPath string) *Rig {
	t.Helper()
	sup, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sup.Start(Context(t))
	if err != nil {
		DumpLog(t, logPath)
		t.Fatalf("start app-server: %v", err)
	}
	r := &Rig{Codex: cfg.Codex, Home: cfg.CodexHome, Cwd: cfg.Cwd, Sup: sup, Inst: inst, Log: logPath}
	t.Cleanup(func() { r.Stop(t) })
	return r
}

// Stop stops the app-server and checks that every process it started is
// gone. Stopping twice is harmless.
func (r *Rig) Stop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Sup.Stop(ctx); err != nil {
		t.Errorf("stop app-server: %v", err)
	}
	GroupGone(t, r.Inst.Identity.PID)
	if t.Failed() {
		DumpLog(t, r.Log)
	}
}

// GroupGone fails the test if a process of the group led by pgid still
// runs. Zombies do not count: Codex leaves some of its git children
// unreaped, and once it exits they wait for init, which may take a while.
// A process SIGKILLed a moment ago may not have died yet, so the check
// is repeated for up to two seconds.
func GroupGone(t testing.TB, pgid int) {
	t.Helper()
	var live []string
	for range 200 {
		var err error
		if live, err = proctest.InGroup(pgid); err != nil {
			t.Fatalf("list processes: %v", err)
		}
		if len(live) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("processes of group %d still run: %v", pgid, live)
}

// DumpLog logs the tail of the app-server's log.
func DumpLog(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	t.Logf("app-server log (%s):\n%s", path, tail(b, 4000))
}

// Connect opens an initialized connection to the app-server at socket,
// closed when the test ends: another client of a shared app-server, as a
// TUI would be.
func Connect(t testing.TB, socket string) *appserver.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Guard)
	defer cancel()
	tr, _, err := appserver.DialUnix(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	c := appserver.New(tr, appserver.Options{})
	t.Cleanup(func() { c.Close() })
	if _, err := c.Initialize(ctx, ClientInfo, appserver.Capabilities{ExperimentalAPI: true}); err != nil {
		t.Fatal(err)
	}
	return c
}

// ThreadWithTurn starts a thread in cwd on c and runs one turn on it to
// completion, so that any client of the app-server can resume it.
func ThreadWithTurn(t testing.TB, c *appserver.Client, cwd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Guard)
	defer cancel()
	th, err := c.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: cwd})
	if err != nil {
		t.Fatal(err)
	}
	sub := c.Subscribe()
	defer sub.Close()
	if _, err := c.TurnStart(ctx, appserver.TurnStartParams{ThreadID: th.Thread.ID, Input: []appserver.Input{appserver.TextInput("hi")}}); err != nil {
		t.Fatal(err)
	}
	for m := range sub.C() {
		if m.Method == appserver.NoteTurnCompleted {
			return th.Thread.ID
		}
	}
	t.Fatalf("no turn/completed: %v", sub.Err())
	return ""
}
