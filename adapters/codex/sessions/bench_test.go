package sessions_test

// Benchmarks of the daemon's path to Codex (`just bench`) against a bare
// client (codextest.Bare) doing the same calls in the same run, on the
// real pinned Codex.

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

func benchManager(b *testing.B, model *fakeprovider.Server) (m *sessions.Manager, socket string) {
	dir := b.TempDir()
	codexHome := codextest.Home(b, model.BaseURL())
	// fsync on: the daemon's real cost of recording what it saw.
	eng := enginetest.Open(b, filepath.Join(dir, "cbth.db"), engine.Options{})
	m = sessions.New(sessions.Config{Codex: codextest.Binary(b), CodexHome: codexHome, RunDir: filepath.Join(dir, "run"),
		TempDir: dir, LogPath: filepath.Join(dir, "app-server.log"), Env: codextest.Env(b, codexHome), Version: "0",
		Clock: engine.SystemClock{}, StartTimeout: codextest.Guard}, eng)
	return m, filepath.Join(dir, "run", "codex.sock")
}

// BenchmarkEnsure: from nothing to an app-server the daemon can hand out.
// daemon: Manager.Ensure (spawn, the supervisor's pid check, initialize,
// the capability probe, the instance recorded). bare: spawn, poll connect
// every 5 ms, handshake, initialize.
func BenchmarkEnsure(b *testing.B) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	defer model.Close()
	daemon := func() time.Duration {
		m, _ := benchManager(b, model)
		t0 := time.Now()
		if _, _, err := m.Instance(context.Background()); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		m.Stop(context.Background())
		return d
	}
	bare := func() time.Duration {
		home := codextest.Home(b, model.BaseURL())
		return codextest.SpawnBare(b, codextest.Binary(b), codextest.Env(b, home), b.TempDir())
	}
	codextest.Pair(b, [2]string{"daemon", "bare"}, [2]func() time.Duration{daemon, bare})
}

// BenchmarkRefresh: one thread/resume round trip of a loaded thread.
// daemon: Manager.Refresh, what the CLI target calls before every
// automatic turn/start (the resume on the daemon's connection and the
// reading recorded, fsynced). bare: the resume alone.
func BenchmarkRefresh(b *testing.B) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	defer model.Close()
	m, sock := benchManager(b, model)
	defer m.Stop(context.Background())
	ctx := context.Background()
	if _, _, err := m.Instance(ctx); err != nil {
		b.Fatal(err)
	}
	thread := codextest.ThreadWithTurn(b, codextest.Connect(b, sock), b.TempDir())
	rep, err := m.Attach(ctx, &ipc.Conn{}, api.CLIAttachArgs{Mode: sessions.ModeBindThread, BoundThreadID: thread, Cwd: "/"})
	if err != nil {
		b.Fatal(err)
	}
	codextest.Pair(b, [2]string{"daemon", "bare"}, [2]func() time.Duration{
		func() time.Duration {
			t0 := time.Now()
			if _, err := m.Refresh(ctx, rep.Session.ManagedSessionID); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		},
		codextest.BareResume(b, sock, thread),
	})
}
