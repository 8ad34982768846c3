package cortexmod_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/adapters/daemon/cortexmod"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/daemontest"
)

// A tree saved through the module is recorded, read back whole, and
// written to disk as its projection (each object executable under the
// runner's #! line, an alias a link); saved again unchanged it records
// nothing; an invalid tree is refused and changes nothing; a tree never
// saved does not exist.
func TestTreeSaveLoadAndProjection(t *testing.T) {
	d := daemontest.Start(t, nil, cortexmod.New())
	root := filepath.Join(t.TempDir(), "ctx")
	runner := filepath.Join(t.TempDir(), "cortexfs-object-runner")
	os.WriteFile(runner, []byte("#!/bin/sh\n"), 0o755)
	echo := object.DebugEcho()
	set := tree.Set{Runner: runner, Objects: []object.Object{echo}, Aliases: []tree.Alias{{Path: tree.AliasMain, Target: echo.Rel()}}}

	if doc := daemontest.Call(d, api.CtxTreeLoad, api.TreeArgs{Root: root}); doc.Exists {
		t.Fatalf("a tree never saved: %+v", doc)
	}
	rep := daemontest.Call(d, api.CtxTreeSave, api.TreeArgs{Root: root, Set: set})
	if rep.Events == 0 {
		t.Fatalf("save: %+v", rep)
	}
	doc := daemontest.Call(d, api.CtxTreeLoad, api.TreeArgs{Root: root})
	if !doc.Exists || doc.Set.Runner != runner || len(doc.Set.Objects) != 1 || !reflect.DeepEqual(doc.Set.Objects[0], echo) ||
		!reflect.DeepEqual(doc.Set.Aliases, set.Aliases) {
		t.Fatalf("loaded %+v", doc)
	}
	exe := filepath.Join(root, "model", "debug", "echo")
	b, err := os.ReadFile(exe)
	if err != nil || !strings.HasPrefix(string(b), "#!"+runner) {
		t.Fatalf("the object's file: %q %v", b, err)
	}
	if fi, _ := os.Stat(exe); fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("the object is not executable: %v", fi.Mode())
	}
	if target, err := os.Readlink(filepath.Join(root, "model", "main")); err != nil || !strings.HasSuffix(target, "debug/echo") {
		t.Errorf("the alias: %q %v", target, err)
	}

	head := daemontest.Call(d, api.DaemonStatus, api.Empty{}).LogHeadSeq
	if again := daemontest.Call(d, api.CtxTreeSave, api.TreeArgs{Root: root, Set: set}); again.Events != 0 ||
		daemontest.Call(d, api.DaemonStatus, api.Empty{}).LogHeadSeq != head {
		t.Fatalf("the same tree again: %+v", again)
	}
	bad := set
	bad.Runner = "relative/runner"
	if _, err := api.CtxTreeSave.Call(d.Client, api.TreeArgs{Root: root, Set: bad}); errs.CodeOf(err) != errs.EINVAL {
		t.Fatalf("a relative runner: %v", err)
	}
	dup := set
	dup.Aliases = []tree.Alias{{Path: tree.AliasMain, Target: "model/no/such"}}
	if _, err := api.CtxTreeSave.Call(d.Client, api.TreeArgs{Root: root, Set: dup}); err == nil {
		t.Fatal("an alias to nothing was saved")
	}
	if daemontest.Call(d, api.DaemonStatus, api.Empty{}).LogHeadSeq != head {
		t.Fatal("a refused tree appended")
	}

	// Removing an object from the set removes its file.
	empty := tree.Set{Runner: runner, Objects: []object.Object{}, Aliases: []tree.Alias{}}
	daemontest.Call(d, api.CtxTreeSave, api.TreeArgs{Root: root, Set: empty})
	if _, err := os.Stat(exe); !os.IsNotExist(err) {
		t.Fatalf("a removed object's file: %v", err)
	}
}
