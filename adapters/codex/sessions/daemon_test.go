package sessions_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

// fakeDaemon runs the fake codex as the Codex daemon of codexHome: an
// app-server listening where a plain `codex`'s daemon does, with env.
// It is killed when the test ends.
func fakeDaemon(t *testing.T, fake, codexHome string, env ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(fake, "app-server", "--listen", "unix://"+sessions.DaemonSocket(codexHome))
	c.Env = append(os.Environ(), env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		_ = c.Wait()
	})
	waitUntil(t, "the fake daemon to serve", func() bool {
		tr, peer, err := appserver.DialUnix(context.Background(), sessions.DaemonSocket(codexHome))
		if err != nil {
			return false
		}
		tr.Close()
		return peer.PID == c.Process.Pid
	})
	return c
}

func newDaemon(t *testing.T, eng *engine.Engine, fake, codexHome string) *sessions.Daemon {
	t.Helper()
	d := sessions.NewDaemon(sessions.DaemonConfig{CodexHome: codexHome, Codex: fake, Env: os.Environ(), TempDir: t.TempDir(),
		Version: "0.0.0-test", Home: t.TempDir(), Clock: engine.SystemClock{}}, testLog{eng})
	t.Cleanup(d.Stop)
	return d
}

func instances(t *testing.T, eng *engine.Engine) []*aggregate.AppServer {
	t.Helper()
	var out []*aggregate.AppServer
	_ = eng.Read(func(v engine.Snapshot) error {
		return v.ForEach(events.KindAppServer, func(st aggregate.State) error {
			if a, ok := st.(*aggregate.AppServer); ok {
				out = append(out, a)
			}
			return nil
		})
	})
	return out
}

// The user's Codex daemon is found from the Codex home alone, probed with
// the schema of the executable that serves (plus thread/loaded/list), and
// recorded as an instance of transport codex_daemon. A daemon that lacks
// a method, or answers as another version than its executable's schema,
// fails the probe: recorded, and no delivery goes through it (ENOTSUP).
// When it exits, its end is recorded; the next one found is a new
// instance.
func TestDaemon_FoundProbedRecorded(t *testing.T) {
	fake := codextest.FakeCodex(t)
	for _, c := range []struct {
		name, missing string
		env           []string
	}{
		{name: "as cbth needs it"},
		{name: "without thread/loaded/list", env: []string{"FAKECODEX_DROP=thread/loaded/list"}, missing: "thread/loaded/list"},
		{name: "of another version", env: []string{"FAKECODEX_VERSION=0.170.0"}, missing: "version 0.169.0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			home := filepath.Join(t.TempDir(), "codex-home")
			if err := os.MkdirAll(home, 0o700); err != nil {
				t.Fatal(err)
			}
			eng := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{NoSync: true})
			d := newDaemon(t, eng, fake, home)
			ctx := codextest.Context(t)
			if _, err := d.Ensure(ctx); errs.CodeOf(err) != errs.EHOSTDOWN {
				t.Fatalf("no daemon yet: %v", err)
			}
			proc := fakeDaemon(t, fake, home, c.env...)
			f, err := d.Ensure(ctx)
			if err != nil || f.PID != proc.Process.Pid {
				t.Fatalf("found %+v (%v), want pid %d", f, err, proc.Process.Pid)
			}
			if c.missing == "" && f.Probe != nil || c.missing != "" && (errs.CodeOf(f.Probe) != errs.ENOTSUP || !strings.Contains(f.Probe.Error(), c.missing)) {
				t.Fatalf("probe: %v, want missing %q", f.Probe, c.missing)
			}
			ins := instances(t, eng)
			if len(ins) != 1 || ins[0].Transport != codex.TransportCodexDaemon || ins[0].ID != f.Nonce || ins[0].ProbePassed != (c.missing == "") || ins[0].PID != f.PID {
				t.Fatalf("recorded %+v", ins)
			}
			if again, _ := d.Ensure(ctx); again.Nonce != f.Nonce || len(instances(t, eng)) != 1 {
				t.Fatal("a second Ensure recorded another instance")
			}

			_ = syscall.Kill(-proc.Process.Pid, syscall.SIGKILL)
			waitUntil(t, "the daemon's end to be recorded", func() bool {
				ins := instances(t, eng)
				return ins[0].State == fsm.AppServerExited && ins[0].ExitReason == codex.ExitExited
			})
			proc = fakeDaemon(t, fake, home, c.env...)
			next, err := d.Ensure(ctx)
			if err != nil || next.Nonce == f.Nonce || next.PID != proc.Process.Pid || len(instances(t, eng)) != 2 {
				t.Fatalf("after a restart: %+v (%v)", next, err)
			}
		})
	}
}

// One cbth home per Codex home: two would each see a thread idle and each
// start a turn. The second is refused EBUSY, naming the first; when the
// first stops, the second may take over.
func TestDaemon_OneHomePerCodexHome(t *testing.T) {
	fake := codextest.FakeCodex(t)
	home := filepath.Join(t.TempDir(), "codex-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	fakeDaemon(t, fake, home)
	ctx := codextest.Context(t)
	first := newDaemon(t, enginetest.Open(t, filepath.Join(t.TempDir(), "a.db"), engine.Options{NoSync: true}), fake, home)
	second := newDaemon(t, enginetest.Open(t, filepath.Join(t.TempDir(), "b.db"), engine.Options{NoSync: true}), fake, home)
	if _, err := first.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := second.Ensure(ctx)
	if errs.CodeOf(err) != errs.EBUSY || !strings.Contains(err.Error(), "another cbth home") {
		t.Fatalf("a second home: %v", err)
	}
	first.Stop()
	deadline := time.Now().Add(codextest.Guard)
	for {
		if _, err = second.Ensure(ctx); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("after the first home stopped: %v", err)
	}
}

// A dropped connection to the same process keeps the instance (and every
// epoch): cbth connects again and its watchers are told.
func TestDaemon_ReconnectKeepsTheInstance(t *testing.T) {
	fake := codextest.FakeCodex(t)
	home := filepath.Join(t.TempDir(), "codex-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	fakeDaemon(t, fake, home)
	eng := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{NoSync: true})
	d := newDaemon(t, eng, fake, home)
	w := &countingWatcher{}
	d.Watch(w)
	ctx := context.Background()
	f, err := d.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Client(f.Nonce)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitUntil(t, "the watcher to hear of the reconnection", func() bool { return w.reconnected() == 1 })
	if again, err := d.Ensure(ctx); err != nil || again.Nonce != f.Nonce || len(instances(t, eng)) != 1 {
		t.Fatalf("after a reconnection: %+v (%v), %d instances", again, err, len(instances(t, eng)))
	}
}
