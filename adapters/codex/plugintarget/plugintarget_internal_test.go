package plugintarget

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/clitarget"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine/command"
)

// A plugin's threads are the host's own: a batch never joins a running
// turn there through turn/steer, whatever [cli] steer says (the daemon
// hands the plugin target the CLI target's configuration as it is).
func TestPluginTargetNeverSteers(t *testing.T) {
	tg := New(clitarget.Config{Steer: true, AcceptTimeout: time.Second}, NewPool(PoolConfig{}), nil, time.Now, nil)
	if tg.cfg.Steer {
		t.Fatal("the plugin target kept [cli] steer on")
	}
	if tg.cfg.AcceptTimeout != time.Second {
		t.Fatalf("the rest of the configuration was lost: accept timeout %v", tg.cfg.AcceptTimeout)
	}
}

// The reasons the CLI target's code gives on the plugin target's behalf
// (Prepare, before every turn/start) name the plugin target, not the CLI
// target; the CLI target's own still say cli.
func TestPluginTargetReasonsCarryItsName(t *testing.T) {
	head := target.Head{ThreadID: "T"}
	gate := target.Gate{OK: true, Route: command.Route{ManagedSessionID: "S", SessionEpoch: 1}}
	plugin := New(clitarget.Config{}, NewPool(PoolConfig{}), nil, time.Now, nil)
	if got := plugin.inner.Prepare(context.Background(), head, gate); got.OK || !strings.HasPrefix(got.Reason, "codex_app_server: read the thread before turn/start: ") {
		t.Errorf("the plugin target's reason: %+v", got)
	}
	cli := clitarget.New(clitarget.Config{}, NewPool(PoolConfig{}), nil, time.Now, nil)
	if got := cli.Prepare(context.Background(), head, gate); got.OK || !strings.HasPrefix(got.Reason, "cli: read the thread before turn/start: ") {
		t.Errorf("the CLI target's reason: %+v", got)
	}
}
