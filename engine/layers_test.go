package engine_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/cbth-dev/cbth"

// layerOf places a package of the module on its floor (spec/engine.md,
// "Layers"): internal/ at the bottom, then events/, engine/,
// projections/, adapters/ and cmd/. The test harnesses of
// internal/testkit/ stand outside the floors (-1): they may import any
// floor but cmd, and only tests import them. ok is false for a folder
// the rule does not name yet.
func layerOf(path string) (layer int, ok bool) {
	rel := strings.TrimPrefix(path, module+"/")
	top, _, _ := strings.Cut(rel, "/")
	switch {
	case rel == "internal/testkit" || strings.HasPrefix(rel, "internal/testkit/"):
		return -1, true
	case top == "internal":
		return 0, true
	case top == "events":
		return 1, true
	case top == "engine":
		return 2, true
	case top == "projections":
		return 3, true
	case top == "adapters":
		return 4, true
	case top == "cmd":
		return 5, true
	}
	return 0, false
}

// adapterFolder is the folder of an adapter one level under adapters/
// (adapters/codex for adapters/codex/sessions).
func adapterFolder(path string) string {
	rel := strings.TrimPrefix(path, module+"/adapters/")
	top, _, _ := strings.Cut(rel, "/")
	return "adapters/" + top
}

// floorAdapters are the packages every other adapter stands on: the home
// directory and the socket transport. They import no other adapter.
var floorAdapters = []string{"adapters/home", "adapters/ipc"}

type listed struct {
	path    string
	imports []string // non-test imports inside the module
	tests   []string // test-only imports inside the module
}

// listModule lists every package of the module with its imports inside
// the module, through go list. A file this platform's build leaves out
// (a _darwin.go file on Linux) still counts: go list names it among
// IgnoredGoFiles and its imports are read from its source, so a rule
// holds for every platform the module builds for.
func listModule(t *testing.T) []listed { return listModuleIn(t, "", module) }

// listModuleIn is listModule for the module mod in the folder dir ("":
// this test's).
func listModuleIn(t *testing.T, dir, mod string) []listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-f",
		`{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}|{{.Dir}}|{{join .IgnoredGoFiles " "}}`, mod+"/...")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	inModule := func(s []string) []string {
		var o []string
		for _, p := range s {
			if (p == mod || strings.HasPrefix(p, mod+"/")) && !slices.Contains(o, p) {
				o = append(o, p)
			}
		}
		return o
	}
	var pkgs []listed
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 5 {
			t.Fatalf("go list line %q", line)
		}
		imports, tests := strings.Fields(f[1]), strings.Fields(f[2])
		for _, name := range strings.Fields(f[4]) {
			if !strings.HasSuffix(name, ".go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(f[3], name), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("read the imports of %s: %v", name, err)
			}
			for _, is := range file.Imports {
				p, _ := strconv.Unquote(is.Path.Value)
				if strings.HasSuffix(name, "_test.go") {
					tests = append(tests, p)
				} else {
					imports = append(imports, p)
				}
			}
		}
		pkgs = append(pkgs, listed{path: f[0], imports: inModule(imports), tests: inModule(tests)})
	}
	return pkgs
}

// The module's imports point down the floors of spec/engine.md
// ("Layers"): no package imports one on a floor above its own, the
// internal floor imports only itself, the harnesses are imported by
// tests alone and import no command, the floor adapters import no other
// adapter, and the folders under adapters/ import each other without a
// cycle.
func TestLayers(t *testing.T) {
	pkgs := listModule(t)
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	folders := map[string]map[string]bool{} // adapter folder -> adapter folders it imports
	for _, p := range pkgs {
		lp, ok := layerOf(p.path)
		if !ok {
			t.Errorf("%s is in a folder the layer rule does not name (spec/engine.md, Layers)", p.path)
			continue
		}
		for _, imp := range p.imports {
			li, ok := layerOf(imp)
			switch {
			case !ok:
			case li == -1 && lp != -1:
				t.Errorf("%s imports the test harness %s (only tests may)", p.path, imp)
			case lp == -1 && li == 5:
				t.Errorf("the test harness %s imports the command %s", p.path, imp)
			case lp != -1 && li > lp:
				t.Errorf("%s imports %s, a floor above its own", p.path, imp)
			}
			if lp == 4 && li == 4 {
				from, to := adapterFolder(p.path), adapterFolder(imp)
				if from == to {
					continue
				}
				if slices.Contains(floorAdapters, strings.TrimPrefix(p.path, module+"/")) {
					t.Errorf("%s, a floor adapter, imports the adapter %s", p.path, imp)
				}
				if folders[from] == nil {
					folders[from] = map[string]bool{}
				}
				folders[from][to] = true
			}
		}
		for _, imp := range p.tests {
			if li, ok := layerOf(imp); ok && li == 5 && lp != 5 {
				t.Errorf("the tests of %s import the command %s", p.path, imp)
			}
		}
	}
	// A cycle among adapter folders: a depth-first walk finding a folder
	// still on its path.
	state := map[string]int{} // 1 on the path, 2 done
	var path []string
	var walk func(f string)
	walk = func(f string) {
		state[f] = 1
		path = append(path, f)
		for _, to := range sortedKeys(folders[f]) {
			switch state[to] {
			case 1:
				t.Errorf("adapter folders import each other: %s -> %s", strings.Join(path, " -> "), to)
			case 0:
				walk(to)
			}
		}
		path = path[:len(path)-1]
		state[f] = 2
	}
	for _, f := range sortedKeys(folders) {
		if state[f] == 0 {
			walk(f)
		}
	}
}

// daemonHost is the daemon's host; its modules are the packages below it.
const daemonHost = module + "/adapters/daemon"

// daemonModule reports whether path is a module of the daemon.
func daemonModule(path string) bool { return strings.HasPrefix(path, daemonHost+"/") }

// The daemon is a composition root (spec/engine.md, "The daemon"): the
// host knows its modules only through daemon.Module, so it imports none
// of them; a module reaches another only through an interface the
// composer hands it, so no module imports another; and only the
// composer (cmd/) puts modules together, so no other product package
// imports one.
func TestDaemonModules(t *testing.T) {
	found := false
	for _, p := range listModule(t) {
		found = found || daemonModule(p.path)
		for _, imp := range p.imports {
			if !daemonModule(imp) {
				continue
			}
			switch {
			case p.path == daemonHost:
				t.Errorf("the daemon's host imports its module %s", imp)
			case daemonModule(p.path) && p.path != imp:
				t.Errorf("the daemon module %s imports the module %s", p.path, imp)
			case !daemonModule(p.path) && !strings.HasPrefix(p.path, module+"/cmd/"):
				t.Errorf("%s imports the daemon module %s (only cmd/ composes them)", p.path, imp)
			}
		}
	}
	if !found {
		t.Errorf("no package under %s: the rule checks nothing", daemonHost)
	}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// The engine depends on no adapter, command or projection, and nothing
// but the engine and the projections touches the bbolt file: adapters
// and commands read the log and its read models through the engine
// (engine/query), never the buckets.
func TestEngineReachesNoAdapter(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/engine/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, module+"/adapters/") || strings.HasPrefix(p, module+"/cmd/") || strings.HasPrefix(p, module+"/projections") {
			t.Errorf("the engine depends on %s", p)
		}
	}
	out, err = exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if f[0] == module+"/engine" || f[0] == module+"/projections" {
			continue
		}
		if l, _ := layerOf(f[0]); l == -1 {
			continue
		}
		if slices.Contains(f[1:], "go.etcd.io/bbolt") {
			t.Errorf("%s reaches into the bbolt file", f[0])
		}
	}
}

// The commands are a core (engine/command: jobs, batches, attempts, the
// sweep, recovery, order, policy, back-off) and one package per product
// under it (engine/command/<product>): a product imports the core and no
// other product; the core imports no product (spec/engine.md, "Commands").
func TestCommandProductsStandOnTheCore(t *testing.T) {
	core := module + "/engine/command"
	products := 0
	for _, p := range listModule(t) {
		isProduct := strings.HasPrefix(p.path, core+"/")
		if isProduct {
			products++
		}
		if p.path != core && !isProduct {
			continue
		}
		for _, imp := range p.imports {
			if strings.HasPrefix(imp, core+"/") {
				t.Errorf("%s imports the product commands %s: products stand on the core, never on each other", p.path, imp)
			}
		}
	}
	if products == 0 {
		t.Fatal("no product package under engine/command")
	}
}

// TestOneHomePerAggregate holds spec/engine.md ("Commands and their
// names"): a file of engine/fsm that declares an aggregate's table has a
// file of the same name in events/ (its events) and engine/aggregate/
// (its state), so an aggregate is read, and changed, in three files of
// one name.
func TestOneHomePerAggregate(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("fsm/*.go")
	if err != nil {
		t.Fatal(err)
	}
	homes := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		var tables []string
		for _, d := range af.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if strings.HasSuffix(n.Name, "Table") {
						tables = append(tables, n.Name)
					}
				}
			}
		}
		if len(tables) == 0 {
			continue
		}
		homes++
		base := filepath.Base(f)
		for _, dir := range []string{"../events", "aggregate"} {
			if _, err := os.Stat(filepath.Join(dir, base)); err != nil {
				t.Errorf("%v declared in engine/fsm/%s, but %s does not exist", tables, base, filepath.Join("engine", dir, base))
			}
		}
	}
	if homes < 10 {
		t.Fatalf("found %d aggregate tables in engine/fsm: the test no longer finds them", homes)
	}
}

// The read models decide nothing of their own (spec/engine.md,
// "Projections import the engine"): a projection stands on the core's
// fair order and holds (engine/command) and on the predicates over
// states (engine/aggregate), never on a product's deciders
// (engine/command/<product>). Every Go file under projections/ is read,
// whatever its build constraint.
func TestReadModelsImportNoProductDeciders(t *testing.T) {
	products := module + "/engine/command/"
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(filepath.Join("..", "projections"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, products) {
				t.Errorf("%s imports the product deciders %s: move the predicate it needs below both (engine/aggregate)", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 5 {
		t.Fatalf("found %d files under projections/: the test no longer finds them", files)
	}
}
