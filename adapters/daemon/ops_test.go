package daemon

import (
	"testing"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
)

// The daemon serves every operation the table declares, and nothing else.
func TestEveryOperationIsServed(t *testing.T) {
	served := (&Daemon{}).ops()
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
}
