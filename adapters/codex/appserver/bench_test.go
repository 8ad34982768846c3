package appserver_test

// Benchmarks against the real pinned Codex (`just bench`): the cost of
// cbth's client and supervisor next to a bare client (codextest.Bare)
// doing the same calls in the same run.

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// BenchmarkSpawn: a new app-server process until its first initialize is
// answered. cbth: supervisor.Start (which also checks the listener's pid).
// bare: exec, poll connect every 5 ms as the supervisor does, handshake,
// initialize.
func BenchmarkSpawn(b *testing.B) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	defer model.Close()
	cbth := func() time.Duration {
		cfg, _ := codextest.SupervisorConfig(b, model)
		sup, err := supervisor.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := sup.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		sup.Stop(context.Background())
		return d
	}
	bareSpawn := func() time.Duration {
		cfg, _ := codextest.SupervisorConfig(b, model)
		os.MkdirAll(cfg.Dir, 0o700)
		return codextest.SpawnBare(b, cfg.Codex, cfg.Env, cfg.Dir)
	}
	codextest.Pair(b, [2]string{"cbth", "bare"}, [2]func() time.Duration{cbth, bareSpawn})
}

// BenchmarkSpawnStdio: the native binary against the npm wrapper, each
// spawned on stdio until initialize is answered (why the tests run the
// native binary).
func BenchmarkSpawnStdio(b *testing.B) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	defer model.Close()
	home := codextest.Home(b, model.BaseURL())
	spawn := func(bin string) func() time.Duration {
		return func() time.Duration {
			cmd := exec.Command(bin, "app-server")
			cmd.Env, cmd.Dir = codextest.Env(b, home), home
			t0 := time.Now()
			tr, err := appserver.StartStdio(cmd)
			if err != nil {
				b.Fatal(err)
			}
			c := appserver.New(tr, appserver.Options{})
			if _, err := c.Initialize(context.Background(), codextest.ClientInfo, appserver.Capabilities{ExperimentalAPI: true}); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			c.Close()
			return d
		}
	}
	wrapper := codextest.Wrapper(b)
	codextest.Pair(b, [2]string{"native", "npm-wrapper"}, [2]func() time.Duration{spawn(codextest.Binary(b)), spawn(wrapper)})
}

// BenchmarkResume: thread/resume of a loaded thread (excludeTurns), one
// round trip, by cbth's client and by the bare one on the same app-server.
func BenchmarkResume(b *testing.B) {
	r := codextest.StartRig(b)
	ctx := context.Background()
	thread := codextest.ThreadWithTurn(b, r.Inst.Client(), r.Cwd)
	cc, err := r.Inst.Dial(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	codextest.Pair(b, [2]string{"cbth", "bare"}, [2]func() time.Duration{
		func() time.Duration {
			t0 := time.Now()
			if _, err := cc.ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: thread, ExcludeTurns: true}); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		},
		codextest.BareResume(b, r.Inst.Socket, thread),
	})
}
