package engine_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The engine depends on no adapter, and no adapter reads the projection
// storage: adapters read through the engine's queries (engine/query).
func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/cbth-dev/cbth/engine/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/cbth-dev/cbth/adapters/") || strings.HasPrefix(p, "github.com/cbth-dev/cbth/cmd/") {
			t.Errorf("the engine depends on %s", p)
		}
	}
	out, err = exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`,
		"github.com/cbth-dev/cbth/adapters/...", "github.com/cbth-dev/cbth/cmd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if imp == "github.com/cbth-dev/cbth/engine/projections" {
				t.Errorf("%s imports the projection storage", f[0])
			}
		}
	}
}
