package engine_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The import rules read every file of a package, not only those this
// platform builds: a module whose Linux files are clean but whose
// _darwin.go file (and _darwin_test.go file) import a package is listed
// with those imports, so TestLayers and TestDaemonModules see them.
func TestListModuleReadsBuildTaggedFiles(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":                       "module " + module + "\n\ngo 1.22\n",
		"engine/x/x.go":                "package x\n",
		"engine/y/y.go":                "package y\n",
		"internal/a/a.go":              "package a\n",
		"internal/a/a_darwin.go":       "package a\n\nimport _ \"" + module + "/engine/x\"\n",
		"internal/a/a_darwin_test.go":  "package a\n\nimport _ \"" + module + "/engine/y\"\n",
		"internal/a/a_windows.go":      "//go:build windows\n\npackage a\n\nimport _ \"os\"\n",
		"adapters/daemon/d.go":         "package daemon\n",
		"adapters/daemon/m1/m1.go":     "package m1\n",
		"adapters/daemon/m2/m2.go":     "package m2\n",
		"adapters/daemon/m2/m2_bsd.go": "//go:build freebsd\n\npackage m2\n\nimport _ \"" + module + "/adapters/daemon/m1\"\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GOFLAGS", "-mod=mod")
	got := map[string]listed{}
	for _, p := range listModuleIn(t, dir, module) {
		got[p.path] = p
	}
	for _, c := range []struct {
		pkg, imp string
		test     bool
	}{
		{"internal/a", "engine/x", false},
		{"internal/a", "engine/y", true},
		{"adapters/daemon/m2", "adapters/daemon/m1", false},
	} {
		p, ok := got[module+"/"+c.pkg]
		if !ok {
			t.Fatalf("go list did not list %s: %v", c.pkg, got)
		}
		list := p.imports
		if c.test {
			list = p.tests
		}
		if !slices.Contains(list, module+"/"+c.imp) {
			t.Errorf("%s: the import of %s from a build-tagged file is missing (imports %v, tests %v)", c.pkg, c.imp, p.imports, p.tests)
		}
	}
	if p := got[module+"/internal/a"]; slices.Contains(p.imports, "os") {
		t.Errorf("an import outside the module is listed: %v", p.imports)
	}
}
