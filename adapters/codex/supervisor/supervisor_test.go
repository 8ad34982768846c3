package supervisor_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

func ctxFor(t *testing.T) context.Context { return codextest.Context(t) }

// The instance serves an initialized connection, under the CODEX_HOME it
// was given, and the socket is where the config says.
func TestStartServesInitializedInstance(t *testing.T) {
	r := codextest.StartRig(t)
	id := r.Inst.Identity
	if id.PID <= 0 || id.StartedAt.IsZero() || len(id.Nonce) != 32 {
		t.Errorf("identity %+v: want a pid, a start time and a 128-bit nonce", id)
	}
	if r.Inst.Init.CodexHome != r.Home {
		t.Errorf("app-server CODEX_HOME %q, want %q", r.Inst.Init.CodexHome, r.Home)
	}
	if r.Inst.Socket != r.Sup.Socket() || filepath.Base(r.Inst.Socket) != supervisor.SocketName {
		t.Errorf("socket %s", r.Inst.Socket)
	}
	if _, err := r.Inst.Client().ThreadStart(ctxFor(t), appserver.ThreadStartParams{Cwd: r.Cwd, Ephemeral: true}); err != nil {
		t.Errorf("thread/start on the supervisor's connection: %v", err)
	}
	st, err := os.Stat(filepath.Dir(r.Inst.Socket))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("socket directory: %v mode %v, want 0700", err, st.Mode().Perm())
	}
	got, err := r.Sup.Instance(ctxFor(t))
	if err != nil || got != r.Inst {
		t.Errorf("Instance() = %v, %v; want the started instance", got, err)
	}
}

// kill -9 of the app-server: the supervisor starts a new process, whose
// identity differs in every part, and serves from it; nothing of the old
// process group is left.
func TestKill9RestartsWithNewIdentity(t *testing.T) {
	r := codextest.StartRig(t)
	old := r.Inst
	if err := syscall.Kill(old.Identity.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-old.Exited()
	if st := old.ExitState(); st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("old instance exit state %v, want killed by SIGKILL", st)
	}
	codextest.GroupGone(t, old.Identity.PID)

	inst, err := r.Sup.Instance(ctxFor(t))
	if err != nil {
		t.Fatalf("no instance after kill -9: %v", err)
	}
	if inst.Identity == old.Identity || inst.Identity.PID == old.Identity.PID || inst.Identity.Nonce == old.Identity.Nonce {
		t.Errorf("identity after restart %s, before %s: want every part new", inst.Identity, old.Identity)
	}
	if r.Sup.Starts() != 2 {
		t.Errorf("Starts() = %d, want 2", r.Sup.Starts())
	}
	// The stale socket the killed process left was taken over by the new
	// one, which answers on it.
	c, err := inst.Dial(ctxFor(t))
	if err != nil {
		t.Fatalf("dial the restarted instance: %v", err)
	}
	defer c.Close()
	if _, err := c.ThreadStart(ctxFor(t), appserver.ThreadStartParams{Cwd: r.Cwd, Ephemeral: true}); err != nil {
		t.Errorf("thread/start on the restarted instance: %v", err)
	}
	r.Inst = inst // the cleanup checks the new group too
}

// A dropped connection to a live process is re-made: same instance, same
// identity, a new client.
func TestReconnectKeepsIdentity(t *testing.T) {
	r := codextest.StartRig(t)
	first := r.Inst.Client()
	first.Close()
	var c *appserver.Client
	for c = r.Inst.Client(); c == first; c = r.Inst.Client() {
		select {
		case <-r.Inst.Exited():
			t.Fatal("the app-server exited")
		case <-ctxFor(t).Done():
			t.Fatal("no reconnection")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := c.ThreadStart(ctxFor(t), appserver.ThreadStartParams{Cwd: r.Cwd, Ephemeral: true}); err != nil {
		t.Errorf("thread/start on the new connection: %v", err)
	}
	inst, err := r.Sup.Instance(ctxFor(t))
	if err != nil || inst != r.Inst || r.Sup.Starts() != 1 {
		t.Errorf("after a reconnection: instance %v (err %v), %d starts; want the same instance, 1 start", inst, err, r.Sup.Starts())
	}
}

// Notifications goes on after a reconnection: it subscribes again on the
// new connection (first false) and hands on what comes there.
func TestNotificationsFollowAReconnection(t *testing.T) {
	r := codextest.StartRig(t)
	subscribed := make(chan bool, 8)
	notes := make(chan string, 64)
	// The callbacks never block: the loop outlives the test until the
	// rig's cleanup stops the instance.
	go r.Inst.Notifications(nil, slog.New(slog.DiscardHandler), func(first bool) {
		select {
		case subscribed <- first:
		default:
		}
	}, func(msg appserver.Message) {
		select {
		case notes <- msg.Method:
		default:
		}
	})
	if first := <-subscribed; !first {
		t.Fatal("the first subscription was not told it is the first")
	}
	r.Inst.Client().Close()
	select {
	case first := <-subscribed:
		if first {
			t.Fatal("the subscription after a reconnection was told it is the first")
		}
	case <-ctxFor(t).Done():
		t.Fatal("no subscription after the reconnection")
	}
	if _, err := r.Inst.Client().ThreadStart(ctxFor(t), appserver.ThreadStartParams{Cwd: r.Cwd, Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case m := <-notes:
			if m == appserver.NoteThreadStarted {
				return
			}
		case <-ctxFor(t).Done():
			t.Fatal("no thread/started from the new connection")
		}
	}
}

// Stop: SIGTERM, the process exits, the socket goes, nothing of the group
// is left, and Instance reports the supervisor stopped.
func TestStopLeavesNothing(t *testing.T) {
	r := codextest.StartRig(t)
	c, err := r.Inst.Dial(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Sup.Stop(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Inst.Exited():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	if st := r.Inst.ExitState(); !st.Exited() {
		t.Errorf("exit state %v, want a clean exit on SIGTERM", st)
	}
	codextest.GroupGone(t, r.Inst.Identity.PID)
	if _, err := os.Lstat(r.Inst.Socket); !os.IsNotExist(err) {
		t.Errorf("socket left after stop: %v", err)
	}
	<-c.Done()
	if !appserver.IsClosed(c.Err()) {
		t.Errorf("other connection after stop: %v", c.Err())
	}
	if _, err := r.Sup.Instance(ctxFor(t)); errs.CodeOf(err) != errs.EHOSTDOWN {
		t.Errorf("Instance after Stop: %v, want EHOSTDOWN", err)
	}
}

// A process that ignores SIGTERM is killed after the grace period, with
// the child it started.
func TestStopKillsAfterGrace(t *testing.T) {
	dir := t.TempDir()
	sup, err := supervisor.New(supervisor.Config{
		Codex: codextest.FakeCodex(t), CodexHome: dir, Dir: filepath.Join(dir, "run"),
		Env:        append(os.Environ(), "FAKECODEX_IGNORE_TERM=1", "FAKECODEX_CHILD=1"),
		ClientInfo: codextest.ClientInfo, Clock: engine.SystemClock{},
		StopGrace: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := sup.Start(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Stop(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if st := inst.ExitState(); st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("exit state %v, want killed by SIGKILL", st)
	}
	codextest.GroupGone(t, inst.Identity.PID)
}

// A start that never gets served kills what it spawned, child included.
func TestFailedStartLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	script := filepath.Join(dir, "codex")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho $$ > "+pidFile+"\nsleep 300 &\nwait\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(supervisor.Config{
		Codex: script, CodexHome: dir, Dir: filepath.Join(dir, "run"),
		ClientInfo: codextest.ClientInfo, Clock: engine.SystemClock{},
		StartTimeout: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Start(ctxFor(t)); errs.CodeOf(err) != errs.ETIMEDOUT {
		t.Fatalf("start of a process that never listens: %v, want ETIMEDOUT", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the stand-in never ran: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("pid file %q: %v", b, err)
	}
	codextest.GroupGone(t, pid)
}

// A process that exits at once fails the first start with EHOSTDOWN and
// leaves nothing behind.
func TestStartFailsWhenCodexExits(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "codex")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho broken >&2\nexit 3\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(supervisor.Config{
		Codex: script, CodexHome: dir, Dir: filepath.Join(dir, "run"),
		ClientInfo: codextest.ClientInfo, Clock: engine.SystemClock{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Start(ctxFor(t)); errs.CodeOf(err) != errs.EHOSTDOWN {
		t.Fatalf("start: %v, want EHOSTDOWN", err)
	}
	if err := sup.Stop(ctxFor(t)); err != nil {
		t.Errorf("stop after a failed start: %v", err)
	}
}

// A second supervisor on a socket an app-server already serves refuses to
// start (EBUSY) and leaves the first one alone.
func TestStartRefusesBusySocket(t *testing.T) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	t.Cleanup(model.Close)
	cfg, logPath := codextest.SupervisorConfig(t, model)
	inst := codextest.StartWith(t, cfg, logPath).Inst
	second, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Start(ctxFor(t)); errs.CodeOf(err) != errs.EBUSY {
		t.Fatalf("second start: %v, want EBUSY", err)
	}
	if _, err := inst.Client().ThreadStart(ctxFor(t), appserver.ThreadStartParams{Cwd: cfg.Cwd, Ephemeral: true}); err != nil {
		t.Errorf("the first app-server after the refused start: %v", err)
	}
}

// A socket left by an app-server that was SIGKILLed (as after a crash of
// the daemon that ran it) does not stop the next start: nobody answers on
// it, and Codex takes it over.
func TestStartRecoversStaleSocket(t *testing.T) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	t.Cleanup(model.Close)
	cfg, logPath := codextest.SupervisorConfig(t, model)
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(cfg.Dir, supervisor.SocketName)
	old := exec.Command(cfg.Codex, "app-server", "--listen", "unix://"+sock)
	old.Env, old.Dir = cfg.Env, cfg.Cwd
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case <-ctxFor(t).Done():
			old.Process.Kill()
			t.Fatal("the first app-server never made its socket")
		case <-time.After(5 * time.Millisecond):
		}
	}
	old.Process.Kill()
	old.Wait()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("no stale socket to recover from: %v", err)
	}

	inst := codextest.StartWith(t, cfg, logPath).Inst
	if _, err := inst.Client().ThreadStart(ctxFor(t), appserver.ThreadStartParams{Cwd: cfg.Cwd, Ephemeral: true}); err != nil {
		t.Errorf("thread/start after recovering the socket: %v", err)
	}
}

func TestConfigChecked(t *testing.T) {
	base := supervisor.Config{Codex: "codex", CodexHome: "/x/home", Dir: "/x/run", ClientInfo: codextest.ClientInfo, Clock: engine.SystemClock{}}
	if _, err := supervisor.New(base); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for name, mut := range map[string]func(*supervisor.Config){
		"no CODEX_HOME":       func(c *supervisor.Config) { c.CodexHome = "" },
		"relative CODEX_HOME": func(c *supervisor.Config) { c.CodexHome = "home" },
		"no codex":            func(c *supervisor.Config) { c.Codex = "" },
		"relative dir":        func(c *supervisor.Config) { c.Dir = "run" },
		"no clock":            func(c *supervisor.Config) { c.Clock = nil },
		"no client name":      func(c *supervisor.Config) { c.ClientInfo.Name = "" },
		"negative grace":      func(c *supervisor.Config) { c.StopGrace = -time.Second },
	} {
		cfg := base
		mut(&cfg)
		if _, err := supervisor.New(cfg); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("%s: %v, want EINVAL", name, err)
		}
	}
}

// A codex that serves through a child of the process started is that
// instance: it starts, serves initialized connections (the start's and
// Dial's), and stops with nothing of its group left.
func TestWrapperServingThroughAChild(t *testing.T) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	t.Cleanup(model.Close)
	cfg, logPath := codextest.SupervisorConfig(t, model)
	cfg.Codex = codextest.ShellWrapper(t, cfg.Codex)
	inst := codextest.StartWith(t, cfg, logPath).Inst
	if inst.ServerPID == inst.Identity.PID || inst.ServerPID <= 0 {
		t.Fatalf("served by pid %d, started %d: the wrapper did not serve through a child", inst.ServerPID, inst.Identity.PID)
	}
	c, err := inst.Dial(ctxFor(t))
	if err != nil {
		t.Fatalf("dial the instance a child serves: %v", err)
	}
	defer c.Close()
	if _, err := c.ThreadStart(ctxFor(t), appserver.ThreadStartParams{Cwd: cfg.Cwd, Ephemeral: true}); err != nil {
		t.Errorf("thread/start: %v", err)
	}
}

// A socket served by a process outside the started one's group and tree
// is refused: a start never publishes it (it times out saying who
// serves), and a running instance's Dial fails ESTALE once its socket
// leads there.
func TestUnrelatedServerRefused(t *testing.T) {
	fake := codextest.FakeCodex(t)
	dir := t.TempDir()
	other := filepath.Join(dir, "other.sock")
	stranger := exec.Command(fake, "app-server", "--listen", "unix://"+other)
	stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stranger.Process.Kill()
		stranger.Wait()
	}()
	for {
		if _, err := os.Stat(other); err == nil {
			break
		}
		select {
		case <-ctxFor(t).Done():
			t.Fatal("the unrelated app-server never made its socket")
		case <-time.After(5 * time.Millisecond):
		}
	}

	// A start whose process points the socket at the stranger.
	script := filepath.Join(dir, "codex")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nln -s \""+other+"\" \"${3#unix://}\"\nexec sleep 300\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(supervisor.Config{
		Codex: script, CodexHome: dir, Dir: filepath.Join(dir, "run"),
		ClientInfo: codextest.ClientInfo, Clock: engine.SystemClock{},
		StartTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sup.Start(ctxFor(t))
	if errs.CodeOf(err) != errs.ETIMEDOUT || !strings.Contains(err.Error(), "served by pid "+strconv.Itoa(stranger.Process.Pid)) {
		t.Fatalf("start on a socket a stranger serves: %v, want ETIMEDOUT naming pid %d", err, stranger.Process.Pid)
	}

	// A running instance (a fake served through a wrapper's child) whose
	// socket is then made to lead to the stranger.
	home := filepath.Join(dir, "home2")
	inst := codextest.StartWith(t, supervisor.Config{
		Codex: codextest.ShellWrapper(t, fake), CodexHome: home, Dir: filepath.Join(home, "run"),
		ClientInfo: codextest.ClientInfo, Clock: engine.SystemClock{},
	}, "").Inst
	if err := os.Remove(inst.Socket); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, inst.Socket); err != nil {
		t.Fatal(err)
	}
	if _, err := inst.Dial(ctxFor(t)); errs.CodeOf(err) != errs.ESTALE {
		t.Fatalf("dial an instance whose socket a stranger serves: %v, want ESTALE", err)
	}
}
