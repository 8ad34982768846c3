package main

import (
	"testing"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
)

// The daemon cbth runs is composed of modules that, with the host, serve
// every operation the table declares.
func TestDaemonModulesServeEveryOperation(t *testing.T) {
	served := daemon.Ops(daemonModules())
	for _, name := range api.All {
		if _, ok := served[name]; !ok {
			t.Errorf("operation %s is declared but no module of daemonModules serves it", name)
		}
	}
	if len(served) != len(api.All) {
		t.Errorf("the daemon serves %d operations, api.All lists %d", len(served), len(api.All))
	}
}
