package daemon_test

import (
	"testing"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
)

// The daemon composed of its modules serves every operation the table
// declares, and nothing else: each operation has one owner, the host or
// one module (a second registration would replace the first).
func TestEveryOperationIsServed(t *testing.T) {
	served := daemon.Ops(modules())
	for _, name := range api.All {
		if _, ok := served[name]; !ok {
			t.Errorf("operation %s is declared but not served", name)
		}
	}
	if len(served) != len(api.All) {
		t.Errorf("the daemon serves %d operations, api.All lists %d", len(served), len(api.All))
	}
	for _, name := range []string{api.Ping.Name, api.DaemonStatus.Name} {
		if !served[name].Passive {
			t.Errorf("%s counts as activity; looking at the daemon must not keep it up", name)
		}
	}
	seen := map[string]string{}
	for _, m := range modules() {
		t1 := api.Table{}
		m.Ops(t1)
		for name := range t1 {
			if other, ok := seen[name]; ok {
				t.Errorf("operation %s is registered by %s and by %s", name, other, m.Name())
			}
			seen[name] = m.Name()
		}
	}
	host := daemon.Ops(nil)
	for name := range host {
		if m, ok := seen[name]; ok {
			t.Errorf("operation %s is registered by the host and by %s", name, m)
		}
	}
}
