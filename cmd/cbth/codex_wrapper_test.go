package main_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
)

// The codex a user has (spec/codex-cli.md section 8): the pinned npm
// package's own `codex`, the node wrapper that `npm i -g @openai/codex`
// puts on PATH, named as the README names it (codex_binary = "codex",
// --codex-binary codex). Under a Node without process.execve (this
// machine's Node 20) the wrapper serves the app-server through a child.

// newWrapperRig is a delivery rig whose home names its codex "codex",
// with the npm wrapper's directory first on the PATH of every cbth the
// test runs, so of the daemon they start; the rig's own codex calls run
// the wrapper too.
func newWrapperRig(t *testing.T) *codexRig {
	t.Helper()
	wrapper := codextest.Wrapper(t)
	r := newDeliveryRig(t, "", "")
	r.env = append(r.env, "PATH="+filepath.Dir(wrapper)+string(os.PathListSeparator)+os.Getenv("PATH"))
	r.writeCodexConfig("codex", r.codexHome, deliveryConfig)
	r.codex = wrapper
	return r
}

// servingPID returns the pid the kernel reports listening on the
// app-server socket, and its process group.
func servingPID(t *testing.T, socket string) (pid, group int) {
	t.Helper()
	tr, peer, err := appserver.DialUnix(codextest.Context(t), socket)
	if err != nil {
		t.Fatalf("dial %s: %v", socket, err)
	}
	tr.Close()
	if group, err = syscall.Getpgid(peer.PID); err != nil {
		t.Fatalf("the process group of pid %d: %v", peer.PID, err)
	}
	return peer.PID, group
}

// wrapperServed checks that the daemon's app-server at socket runs the
// wrapper as its process group's leader (the pid the daemon started) and,
// where this Node makes the wrapper fork, is served by another member of
// the group: the case this file is for.
func wrapperServed(t *testing.T, socket string) (group int) {
	t.Helper()
	server, group := servingPID(t, socket)
	if !codextest.WrapperForks(t) {
		// A Node with process.execve: the wrapper becomes the codex it
		// runs. The through-a-child case is held on any Node by
		// adapters/codex/supervisor's TestWrapperServingThroughAChild
		// (a shell wrapper, which always forks).
		t.Logf("this Node's npm wrapper serves in place (pid %d): the through-a-child case is not reached here", server)
		return group
	}
	if server == group {
		t.Fatalf("the app-server at %s is served by its group's leader %d: the wrapper did not serve through a child", socket, server)
	}
	return group
}

// `codex_binary = "codex"` with the wrapper first on PATH: the daemon's
// app-server and the TUI `cbth cli run` starts are the wrapper, and a
// result is delivered into the thread once.
func TestCLIDelivery_NpmWrapperOnPath(t *testing.T) {
	t.Parallel()
	r := newWrapperRig(t)
	thread, tm := r.foreground("[mark:earlier]")
	r.complete(thread, "[mark:w1] the CI run passed")
	in := r.waitBatch(thread, "the batch to close delivered", closedDelivered)
	h := in.Head
	if h == nil || h.Marker == "" || h.TurnID == "" || in.Batch.Count != 1 {
		t.Fatalf("delivered batch %+v, head %+v", in.Batch, h)
	}
	if n := r.model.Count(h.Marker); n != 1 || r.threadOfMarker(h.Marker) != thread {
		t.Fatalf("the model got the marker %s in %d requests (thread %s), want 1 in %s", h.Marker, n, r.threadOfMarker(h.Marker), thread)
	}
	tm.waitText("ECHO:["+h.Marker+"]", codextest.Guard)
	st := r.events("appserver.started")
	if len(st) != 1 || st[0].Payload["codex_binary"] != r.codex {
		t.Fatalf("app-servers started: %+v, want one running %s", st, r.codex)
	}
	if group := wrapperServed(t, filepath.Join(r.root, "run", "codex", "codex.sock")); group != int(st[0].Payload["pid"].(float64)) {
		t.Fatalf("the app-server is served in group %d, not in the group of the pid started (%v)", group, st[0].Payload["pid"])
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run exited %d", code)
	}
}

// `cbth plugin enqueue --codex-binary codex` with the wrapper first on
// the daemon's PATH: the delivery-owned target starts the wrapper's
// app-server and delivers the result once; it ends with the daemon.
func TestPluginTarget_NpmWrapperOnPath(t *testing.T) {
	t.Parallel()
	r := newWrapperRig(t)
	thread := r.execThread("[mark:earlier]")
	e := r.enqueue(thread, "k1", "--codex-binary", "codex")
	if e.Target == nil || e.Target.Ownership != "delivery_owned" || e.Target.CodexBinary != "codex" {
		t.Fatalf("resolved target %+v", e.Target)
	}
	r.ok(nil, "job", "complete", "--job-id", e.JobID, "--summary", "[mark:pw1] the CI run passed")
	in := r.waitBatch(thread, "the batch to close delivered", closedDelivered)
	h := in.Head
	if h == nil || h.ManagedSessionID != e.Target.ManagedSessionID || h.TurnID == "" || in.Batch.Count != 1 {
		t.Fatalf("delivered batch %+v, head %+v", in.Batch, h)
	}
	if n := r.model.Count(h.Marker); n != 1 || r.threadOfMarker(h.Marker) != thread {
		t.Fatalf("the model got the marker %s in %d requests (thread %s), want 1 in %s", h.Marker, n, r.threadOfMarker(h.Marker), thread)
	}
	socks, err := filepath.Glob(filepath.Join(r.root, "run", "plugin", "*", "codex.sock"))
	if err != nil || len(socks) != 1 {
		t.Fatalf("plugin app-server sockets %v (%v), want 1", socks, err)
	}
	group := wrapperServed(t, socks[0])
	r.ok(nil, "daemon", "stop")
	codextest.GroupGone(t, group)
}

// A daemon killed with kill -9 whose codex serves through a child: the
// next daemon recognises the orphan by the recorded pid's group and
// stops all of it.
func TestCLIRun_OrphanedWrapperTakenOver(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.codexConfig(codextest.ShellWrapper(t, codextest.FakeCodex(t)), filepath.Join(t.TempDir(), "codex-home"), "")
	orphanTakenOver(t, h, true)
}
