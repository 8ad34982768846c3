// Package daemontest runs a cbth daemon inside a test's process, on the
// real socket and log of a fresh home and on a manual clock, composed of
// the modules the test names: a daemon module's tests drive it through
// its operations, as a client would, with fakes only at its edges (a
// delivery target, the clock).
package daemontest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

// T0 is the manual clock's start.
var T0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// Daemon is a daemon running until the test ends.
type Daemon struct {
	T      testing.TB
	Home   home.Home
	Clock  *engine.ManualClock
	Client *ipc.Client
}

// Config is the home's defaults with the delivery core's waits off: a
// ready batch goes at the next scheduling pass.
func Config() home.Config {
	c := home.Defaults()
	c.Delivery.MaxWaitWindow.Duration = 0
	c.Delivery.MinSendInterval.Duration = 0
	return c
}

// Start runs a daemon of mods on a fresh home, in manual mode (it acts
// only when asked) without fsync, with adjust (when not nil) changing
// the options first. It returns once the daemon answers; when the test
// ends the daemon stops and its log must verify.
func Start(t testing.TB, adjust func(*daemon.Options), mods ...daemon.Module) *Daemon {
	t.Helper()
	opt := daemon.Options{Home: home.Home{Root: filepath.Join(t.TempDir(), "home")}, Config: Config(), Clock: engine.NewManualClock(T0),
		Manual: true, NoSync: true, Version: "test", Log: slog.New(slog.DiscardHandler), Modules: mods}
	if adjust != nil {
		adjust(&opt)
	}
	return Run(t, opt)
}

// Run runs a daemon with exactly opt until the test ends, as Start does.
func Run(t testing.TB, opt daemon.Options) *Daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, opt) }()
	var c *ipc.Client
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if c, err = ipc.Dial(opt.Home.Socket(), "test"); err == nil {
			if _, err = api.Ping.Call(c, api.Empty{}); err == nil {
				break
			}
			c.Close()
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("daemontest: the daemon did not come up: %v", err)
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("daemontest: the daemon stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemontest: the daemon: %v", err)
		}
		enginetest.VerifyFile(t, opt.Home.DB())
	})
	clock, _ := opt.Clock.(*engine.ManualClock)
	return &Daemon{T: t, Home: opt.Home, Clock: clock, Client: c}
}

// Call calls op and fails the test on an error.
func Call[Req, Rep any](d *Daemon, op api.Op[Req, Rep], req Req) Rep {
	d.T.Helper()
	rep, err := op.Call(d.Client, req)
	if err != nil {
		d.T.Fatalf("%s: %v", op.Name, err)
	}
	return rep
}

// Advance moves the daemon's clock by by, through the daemon (which
// sweeps and schedules as a clock advance does), and returns the time.
func (d *Daemon) Advance(by time.Duration) time.Time {
	d.T.Helper()
	return Call(d, api.DebugClock, api.AdvanceArgs{By: by.String()}).Now
}
