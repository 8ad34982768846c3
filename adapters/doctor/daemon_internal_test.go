package doctor

import (
	"context"
	"fmt"
	"testing"

	"github.com/cbth-dev/cbth/adapters/daemon/desktopmod"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
	"github.com/cbth-dev/cbth/projections"
)

// With a daemon of this protocol: it answers its status (a newer or
// older cbth is told to restart it), the log is verified through it, and
// the relay check asks it.
func TestChecksWithADaemon(t *testing.T) {
	d := daemontest.Start(t, nil, desktopmod.New())
	daemontest.Call(d, api.JobSubmit, api.SubmitArgs{TargetKind: command.TargetDebug, SourceThreadID: "T", TaskKind: "ci", TaskSummary: "x"})
	e := env(t)
	e.Home = d.Home
	expect(t, "the daemon", checkDaemon(context.Background(), e), OK, fmt.Sprintf("cbth test (protocol %d)", ipc.Proto), "")
	if e.status == nil {
		t.Fatal("the daemon check kept no status for the checks after it")
	}
	expect(t, "the log through the daemon", checkLog(context.Background(), e), OK, "1 event, head seq 1", "")
	expect(t, "the relay", checkRelay(context.Background(), e), OK, "no relay scanner bound", "")

	other := env(t)
	other.Home, other.Version = d.Home, "other"
	expect(t, "another version", checkDaemon(context.Background(), other), Warn, "this cbth is other", "cbth daemon restart")
	skew := env(t)
	skew.Home, skew.Proto = d.Home, ipc.Proto+1
	if fs := checkDaemon(context.Background(), skew); len(fs) != 1 || fs[0].State != Fail {
		t.Errorf("another protocol: %+v", fs)
	}
	behind := env(t)
	behind.Home = d.Home
	expect(t, "a daemon not asked", checkLog(context.Background(), behind), Skip, "cannot be asked", "")
}

// With no daemon, the log file is verified read-only.
func TestCheckLogOffline(t *testing.T) {
	e := env(t)
	if err := e.Home.Ensure(); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(e.Home.DB(), engine.Options{Projections: projections.Store{}, Clock: engine.NewManualClock(daemontest.T0)})
	if err != nil {
		t.Fatal(err)
	}
	eng.Close()
	expect(t, "an empty log", checkLog(context.Background(), e), OK, "0 events", "")
}
