package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Registering objects is an event; the tree under $CTX_ROOT is its
// projection, written by the daemon and mended from the log at start.
func TestCtxTreeIsAProjection(t *testing.T) {
	h := newHome(t)
	runner := filepath.Join(t.TempDir(), "cortexfs-object-runner")
	if err := os.Symlink(cbthBin, runner); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(h.root, "ctx")
	h.ok(nil, "ctx", "init", "--runner", runner)
	h.ok(nil, "model", "add", "openai/gpt-4o", "--driver", "openai-chat", "--id", "gpt-4o")
	out, err := exec.Command(filepath.Join(root, "model", "main"), "hello").Output()
	if err != nil || !strings.Contains(string(out), `"text":"hello"`) {
		t.Fatalf("model/main: %v %s", err, out)
	}
	var page struct {
		Events []struct{ Type string } `json:"events"`
	}
	if err := callOpArgs(h.root, "events.read", map[string]any{"from": 1}, &page); err != nil {
		t.Fatal(err)
	}
	puts := 0
	for _, e := range page.Events {
		if e.Type == "ctxtree.object_put" {
			puts++
		}
	}
	if puts != 2 {
		t.Fatalf("%d object registrations in the log, want 2 (debug/echo, openai/gpt-4o)", puts)
	}
	// Files lost behind the daemon's back come back from the log.
	h.ok(nil, "daemon", "stop")
	os.RemoveAll(filepath.Join(root, "model", "openai"))
	h.status()
	if _, err := os.Stat(filepath.Join(root, "model", "openai", "gpt-4o.d", "id")); err != nil {
		t.Fatalf("the tree was not rebuilt from the log at start: %v", err)
	}
	// Removing is an event too, and the files follow.
	h.ok(nil, "model", "rm", "openai/gpt-4o")
	if _, err := os.Stat(filepath.Join(root, "model", "openai", "gpt-4o")); !os.IsNotExist(err) {
		t.Fatalf("removed model still on disk: %v", err)
	}
	var list []map[string]any
	h.ok(&list, "model", "list")
	if len(list) != 1 {
		t.Fatalf("model list: %v, want only debug/echo", list)
	}
	h.verify()
}
