package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/projections/inbox"
)

// Every Desktop and service command's --json output has the shape
// spec/desktop.md documents, both ways (see TestJSONShapesMatchTheSpec).
func TestDesktopJSONShapesMatchTheSpec(t *testing.T) {
	t.Parallel()
	c := &shapeCheck{t: t, shapes: loadShapesFrom(t, "desktop.md"), seen: map[string]bool{}}
	h := desktopHome(t)
	doc := func(shape string, args ...string) {
		t.Helper()
		r := h.run(append(args, "--json")...)
		if r.code != 0 {
			t.Fatalf("cbth %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		c.doc(shape, strings.Join(args, " "), r.stdout)
	}
	doc("installation-state", "desktop", "installation-state")
	doc("installation-repair", "desktop", "installation-state", "repair", "--read-transport", "direct_file_read",
		"--read-transport-capability", "validated", "--writeback-capability", "validated")
	doc("binding-repair", "desktop", "binding", "repair", "--source-thread-id", "S", "--caller-automation-id", "A")
	doc("binding-list", "desktop", "binding", "list")
	// Part 1 never fills arm-pending and pause-due: their entries are held
	// to the spec as the reader's types encode them.
	for shape, v := range map[string]any{
		"list-arm-pending":          inbox.List[inbox.ArmPendingEntry]{Entries: []inbox.ArmPendingEntry{{}}},
		"list-pause-due":            inbox.List[inbox.PauseDueEntry]{Entries: []inbox.PauseDueEntry{{}}},
		"file-arm-pending-bindings": inbox.ArmPendingBindings{Entries: []inbox.ArmPendingEntry{{}}},
		"file-pause-due-bindings":   inbox.PauseDueBindings{Entries: []inbox.PauseDueEntry{{}}},
	} {
		b, _ := json.Marshal(v)
		c.doc(shape, shape+" as encoded", string(b))
	}
	doc("bridge-preflight", "desktop", "bridge-preflight", "--bridge-thread-id", bridge)
	h.desktopJob("S")
	doc("claim-next-ready", "desktop", "claim-next-ready", "--bridge-thread-id", bridge)
	doc("list-arm-pending", "desktop", "list-arm-pending", "--bridge-thread-id", bridge)
	doc("list-pause-due", "desktop", "list-pause-due", "--bridge-thread-id", bridge)
	// Part 2: the writeback helpers and the relay.
	r := h.claim().Ready
	doc("relay-marker-issue", append([]string{"desktop", "relay", "marker", "issue", "--bridge-thread-id", bridge, "--kind", "arm-pending"},
		tokenArgs(r, "wake-1")...)...)
	rollout := filepath.Join(t.TempDir(), "rollout.jsonl")
	if err := os.WriteFile(rollout, []byte("{\"type\":\"session_meta\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc("relay-scanner-bind", "desktop", "relay", "scanner", "bind", "--bridge-thread-id", bridge, "--rollout-path", rollout)
	doc("relay-consume", "desktop", "relay", "consume-transcript", "--bridge-thread-id", bridge, "--rollout-path", rollout, "--marker", "m1-none")
	h.preflight() // with the scanner bound, the ready entry carries its marker
	doc("relay-print", "desktop", "relay", "print", "--bridge-thread-id", bridge, "--kind", "arm-pending", "--marker", h.claim().Ready.RelayMarker)
	var p armPending
	h.ok(&p, append([]string{"desktop", "note-arm-pending"}, tokenArgs(r, "wake-1")...)...)
	doc("note-arm-pending", append([]string{"desktop", "note-arm-pending"}, tokenArgs(r, "wake-1")...)...)
	doc("note-arm", append([]string{"desktop", "note-arm"}, append(tokenArgs(r, "wake-1"), "--bridge-arm-lease-id", p.Lease)...)...)
	doc("note-boundary-crossed", crossArgs(r)...)
	h.advance("91s")
	doc("note-paused", "desktop", "note-paused", "--source-thread-id", "S", "--generation", "1", "--bridge-request-id", "wake-2")
	doc("batch-skip-head", "batch", "skip-head", "--source-thread-id", "S")
	doc("binding-unbind", "desktop", "binding", "unbind", "--source-thread-id", "S", "--delete-automation", "true")
	res := h.run("desktop", "claim-next-ready", "--bridge-thread-id", "nobody", "--json")
	c.doc("error", "claim-next-ready for another bridge", res.stdout)

	for _, f := range []struct{ shape, rel string }{
		{"file-manifest", "current-snapshot.json"}, {"file-ready-threads", "snapshots/*/ready-threads.json"},
		{"file-arm-pending-bindings", "snapshots/*/arm-pending-bindings.json"}, {"file-pause-due-bindings", "snapshots/*/pause-due-bindings.json"},
		{"file-bindings", "snapshots/*/bindings.json"}, {"file-installation-state", "snapshots/*/installation-state.json"},
	} {
		matches, _ := filepath.Glob(filepath.Join(h.root, "inbox", f.rel))
		if len(matches) == 0 {
			t.Fatalf("no %s", f.rel)
		}
		for _, m := range matches {
			b, err := os.ReadFile(m)
			if err != nil {
				t.Fatal(err)
			}
			c.doc(f.shape, f.rel, string(b))
		}
	}

	svc := t.TempDir()
	ctl := fakeCtl(t)
	h.env = append(h.env, "XDG_CONFIG_HOME="+svc, "CBTH_SERVICE_CTL="+ctl.path)
	doc("service", "service", "install")
	doc("service", "service", "status")
	doc("service", "service", "uninstall")

	for name := range c.shapes {
		if !c.seen[name] {
			t.Errorf("spec/desktop.md documents shape %s, which nothing printed here", name)
		}
	}
}
