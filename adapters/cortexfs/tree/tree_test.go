package tree

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/internal/errs"
)

const runner = "/usr/bin/cortexfs-object-runner"

func gpt4o() object.Object {
	return object.Object{
		Kind: "model", Path: "openai/gpt-4o",
		Meta:     object.Meta{ID: "openai/gpt-4o", Name: "gpt-4o", Type: "model", OwnedBy: "openai", ContextLength: 128000},
		NativeID: "gpt-4o",
		Driver:   object.Routes{"default": {"openai-chat"}, "agent": {"openai-responses", "openai-chat"}},
		Caps:     []string{"chat", "stream", "tool_call_syntax"},
		Defaults: []object.KV{{Key: "temperature", Value: "0.2"}},
		Session:  "socket", Status: "ready",
	}
}

// snapshot lists every path under root with its mode and content digest
// (or link target), so two trees can be compared byte for byte.
func snapshot(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		st, _ := os.Lstat(p)
		line := fmt.Sprintf("%s %v", rel, st.Mode())
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			line += " -> " + strings.TrimPrefix(l, root)
		case st.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			line += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func TestInitLayoutAndModes(t *testing.T) {
	root := filepath.Join(t.TempDir(), "ctx")
	if _, err := Init(root, runner); err != nil {
		t.Fatal(err)
	}
	checks := map[string]fs.FileMode{
		"":                           DirMode | fs.ModeDir,
		"model":                      DirMode | fs.ModeDir,
		"model/debug/echo":           ObjectMode,
		"model/debug/echo.d":         DirMode | fs.ModeDir,
		"model/debug/echo.d/id":      FileMode,
		"model/debug/echo.d/driver":  FileMode,
		"model/debug/echo.d/cap":     FileMode,
		"model/debug/echo.d/default": FileMode,
		"model/debug/echo.d/session": FileMode,
		"model/debug/echo.d/status":  FileMode,
		"model/debug/echo.d/log":     FileMode,
	}
	for rel, mode := range checks {
		st, err := os.Lstat(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if st.Mode() != mode {
			t.Errorf("%s mode %v, want %v", rel, st.Mode(), mode)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "model/debug/echo.sock")); !os.IsNotExist(err) {
		t.Errorf("echo.sock must not exist for a session=none model: %v", err)
	}
	for _, a := range []string{"model/main", "model/helper"} {
		l, err := os.Readlink(filepath.Join(root, a))
		if err != nil || l != filepath.Join(root, "model/debug/echo") {
			t.Errorf("%s -> %q, %v", a, l, err)
		}
	}
	body, _ := os.ReadFile(filepath.Join(root, "model/debug/echo"))
	if !strings.HasPrefix(string(body), "#!"+runner+"\n") {
		t.Errorf("metadata file starts %q", body)
	}
	drv, _ := os.ReadFile(filepath.Join(root, "model/debug/echo.d/driver"))
	if string(drv) != "debug\n" {
		t.Errorf("driver file %q", drv)
	}
	// no temp files left behind
	for _, l := range snapshot(t, root) {
		if strings.Contains(l, ".tmp") {
			t.Errorf("leftover temp: %s", l)
		}
	}
}

func TestMaterializeIsPureAndPrunes(t *testing.T) {
	set := Set{Runner: runner, Objects: []object.Object{object.DebugEcho(), gpt4o()},
		Aliases: []Alias{{AliasMain, "model/openai/gpt-4o"}, {AliasHelper, "model/debug/echo"}, {"home/1000/model/coder", "model/openai/gpt-4o"}}}
	a, b := t.TempDir(), t.TempDir()
	if err := Materialize(a, set); err != nil {
		t.Fatal(err)
	}
	// b gets an unrelated earlier state first; the result must still match.
	if _, err := Init(b, runner); err != nil {
		t.Fatal(err)
	}
	if err := Materialize(b, set); err != nil {
		t.Fatal(err)
	}
	sa, sb := snapshot(t, a), snapshot(t, b)
	if !reflect.DeepEqual(sa, sb) {
		t.Fatalf("trees differ:\n%s\n---\n%s", strings.Join(sa, "\n"), strings.Join(sb, "\n"))
	}
	loaded, err := Load(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := Materialize(t.TempDir(), loaded); err != nil {
		t.Fatal(err)
	}
	if len(loaded.Objects) != 2 || len(loaded.Aliases) != 3 || loaded.Runner != runner {
		t.Fatalf("Load = %+v", loaded)
	}
	if o, _ := loaded.Object("model/openai/gpt-4o"); !reflect.DeepEqual(o, gpt4o()) {
		t.Errorf("loaded object differs: %+v", o)
	}
	// A session directory under home survives pruning of the object.
	sess := filepath.Join(a, "home/1000/model/openai/gpt-4o.d/session/default")
	if err := os.MkdirAll(sess, 0o700); err != nil {
		t.Fatal(err)
	}
	smaller := Set{Runner: runner, Objects: []object.Object{object.DebugEcho()}, Aliases: []Alias{{AliasMain, "model/debug/echo"}}}
	if err := Materialize(a, smaller); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"model/openai/gpt-4o", "model/openai/gpt-4o.d", "model/helper", "home/1000/model/coder"} {
		if _, err := os.Lstat(filepath.Join(a, gone)); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", gone, err)
		}
	}
	if _, err := os.Stat(sess); err != nil {
		t.Errorf("session dir removed: %v", err)
	}
}

func TestSetValidation(t *testing.T) {
	echo := object.DebugEcho()
	cases := []struct {
		set  Set
		code errs.Code
	}{
		{Set{Runner: "rel", Objects: []object.Object{echo}}, errs.EINVAL},
		{Set{Runner: runner, Objects: []object.Object{echo, echo}}, errs.EEXIST},
		{Set{Runner: runner, Objects: []object.Object{echo}, Aliases: []Alias{{AliasMain, "model/openai/gpt-4o"}}}, errs.ENOENT},
		{Set{Runner: runner, Objects: []object.Object{echo}, Aliases: []Alias{{"model/coder", "model/debug/echo"}}}, errs.EINVAL},
		{Set{Runner: runner, Objects: []object.Object{echo}, Aliases: []Alias{{"home/x/model/coder", "model/debug/echo"}}}, errs.EINVAL},
		{Set{Runner: runner, Objects: []object.Object{echo}, Aliases: []Alias{{"home/1/model/a.sock", "model/debug/echo"}}}, errs.EINVAL},
		{Set{Runner: runner, Objects: []object.Object{echo}, Aliases: []Alias{{"home/1/tool/a", "model/debug/echo"}}}, errs.EINVAL},
	}
	for i, c := range cases {
		err := Materialize(t.TempDir(), c.set)
		if errs.CodeOf(err) != c.code {
			t.Errorf("case %d: %v, want %s", i, err, c.code)
		}
	}
}

// The sample tree under fixtures/ parses, and rendering it again gives the
// same bytes.
func TestFixtureTree(t *testing.T) {
	src := filepath.Join("..", "..", "..", "fixtures", "cortexfs")
	set, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Objects) != 1 || set.Runner != "/usr/bin/cortexfs-object-runner" {
		t.Fatalf("set %+v", set)
	}
	o := set.Objects[0]
	if o.NativeID != "gpt-4o" || strings.Join(o.Driver.Resolve("agent"), ",") != "openai-responses,openai-chat" || o.Session != "socket" {
		t.Errorf("object %+v", o)
	}
	out := t.TempDir()
	if err := Materialize(out, set); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"model/openai/gpt-4o", "model/openai/gpt-4o.d/driver", "model/openai/gpt-4o.d/cap", "model/openai/gpt-4o.d/default", "model/openai/gpt-4o.d/id"} {
		a, _ := os.ReadFile(filepath.Join(src, rel))
		b, _ := os.ReadFile(filepath.Join(out, rel))
		if string(a) != string(b) {
			t.Errorf("%s differs:\n%s\n---\n%s", rel, a, b)
		}
	}
}

func TestUserAliasPaths(t *testing.T) {
	for p, want := range map[string]bool{
		"home/1000/model/coder": true, "home/0/agent/a": true, "home/1/tool/fs.read": true,
		"home//model/x": false, "home/x1/model/x": false, "home/1/models/x": false, "home/1/model/": false,
		"home/1/model/a/b": false, "home/1/model": false, "x/1/model/a": false, "model/main": false,
	} {
		if _, _, ok := userAlias(p); ok != want {
			t.Errorf("%s: %v", p, ok)
		}
	}
}
