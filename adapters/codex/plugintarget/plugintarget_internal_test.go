package plugintarget

import (
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/clitarget"
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
