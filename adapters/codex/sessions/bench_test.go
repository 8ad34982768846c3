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
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

func benchShared(b *testing.B, model *fakeprovider.Server) (srv *sessions.Shared, eng *engine.Engine, socket string) {
	dir := b.TempDir()
	codexHome := codextest.Home(b, model.BaseURL())
	// fsync on: the daemon's real cost of recording what it saw.
	eng = enginetest.Open(b, filepath.Join(dir, "cbth.db"), engine.Options{})
	srv = sessions.NewShared(sessions.Config{Codex: codextest.Binary(b), CodexHome: codexHome, RunDir: filepath.Join(dir, "run"),
		TempDir: dir, LogPath: filepath.Join(dir, "app-server.log"), Env: codextest.Env(b, codexHome), Version: "0",
		Clock: engine.SystemClock{}, StartTimeout: codextest.Guard}, testLog{eng})
	return srv, eng, filepath.Join(dir, "run", "codex.sock")
}

// BenchmarkEnsure: from nothing to an app-server the daemon can hand out.
// daemon: Shared.Ensure (spawn, the supervisor's pid check, initialize,
// the capability probe, the instance recorded). bare: spawn, poll connect
// every 5 ms, handshake, initialize.
func BenchmarkEnsure(b *testing.B) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	defer model.Close()
	daemon := func() time.Duration {
		srv, _, _ := benchShared(b, model)
		t0 := time.Now()
		if _, err := srv.Ensure(context.Background()); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		srv.Stop(context.Background())
		return d
	}
	bare := func() time.Duration {
		home := codextest.Home(b, model.BaseURL())
		return codextest.SpawnBare(b, codextest.Binary(b), codextest.Env(b, home), b.TempDir())
	}
	codextest.Pair(b, [2]string{"daemon", "bare"}, [2]func() time.Duration{daemon, bare})
}

// BenchmarkRead: one thread/resume round trip of a loaded thread.
// daemon: Shared.Read, what the CLI target calls before every automatic
// turn/start, and the reading recorded (fsynced) as the barrier records
// it. bare: the resume alone.
func BenchmarkRead(b *testing.B) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	defer model.Close()
	srv, eng, sock := benchShared(b, model)
	defer srv.Stop(context.Background())
	ctx := context.Background()
	in, err := srv.Ensure(ctx)
	if err != nil {
		b.Fatal(err)
	}
	thread := codextest.ThreadWithTurn(b, codextest.Connect(b, sock), b.TempDir())
	ts, err := srv.Resume(ctx, in.Nonce, thread)
	if err != nil {
		b.Fatal(err)
	}
	reading := sessions.ReadingOf(ts)
	bound, _ := enginetest.Answer(b, eng, testMeta, codex.AttachSession{Mode: codex.ModeBindThread, ThreadID: thread, Instance: in.Nonce, Reading: &reading})
	codextest.Pair(b, [2]string{"daemon", "bare"}, [2]func() time.Duration{
		func() time.Duration {
			t0 := time.Now()
			ref, err := srv.Read(ctx, bound.SessionID)
			if err == nil {
				_, err = eng.Execute(ctx, testMeta, *ref.Record)
			}
			if err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		},
		codextest.BareResume(b, sock, thread),
	})
}
