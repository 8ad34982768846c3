package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// codexRig is a cbth home whose daemon runs the pinned Codex CLI, with a
// Codex home on a fake model and a project directory the TUI trusts.
type codexRig struct {
	*homeDir
	codex     string
	codexHome string
	project   string
	model     *fakeprovider.Server
}

func newCodexRig(t *testing.T, config string) *codexRig {
	t.Helper()
	model := fakeprovider.Start(fakeprovider.Codex, "")
	t.Cleanup(model.Close)
	project := filepath.Join(t.TempDir(), "project")
	if err := os.Mkdir(project, 0o700); err != nil {
		t.Fatal(err)
	}
	r := &codexRig{codex: codextest.Binary(t), project: project, model: model}
	r.codexHome = codextest.TUIHome(t, model.BaseURL(), project)
	r.homeDir = newHome(t)
	r.codexConfig(r.codex, r.codexHome, config)
	return r
}

// codexConfig writes the home's config.toml: codex_binary and codex_home,
// then extra. No process of an app-server the home ran may outlive the
// test.
func (h *homeDir) codexConfig(binary, codexHome, extra string) {
	h.t.Helper()
	h.writeCodexConfig(binary, codexHome, extra)
	h.t.Cleanup(func() {
		h.run("daemon", "stop")
		for _, e := range h.events("appserver.started") {
			codextest.GroupGone(h.t, int(e.Payload["pid"].(float64)))
		}
	})
}

// writeCodexConfig writes the home's config.toml as codexConfig does,
// and nothing else.
func (h *homeDir) writeCodexConfig(binary, codexHome, extra string) {
	h.t.Helper()
	if err := os.MkdirAll(h.root, 0o700); err != nil {
		h.t.Fatal(err)
	}
	cfg := fmt.Sprintf("codex_binary = %q\ncodex_home = %q\n%s", binary, codexHome, extra)
	if err := os.WriteFile(filepath.Join(h.root, "config.toml"), []byte(cfg), 0o600); err != nil {
		h.t.Fatal(err)
	}
}

// logged is one event of the home's log, as `events export` prints it.
type logged struct {
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Actor   string `json:"actor"`
	Stream  struct{ Kind, ID string }
	Payload map[string]any `json:"payload"`
	line    string
}

// events returns the log's events of the given types (all session and
// app-server events when none is given, every event for "*").
func (h *homeDir) events(types ...string) []logged {
	h.t.Helper()
	r := h.run("events", "export")
	if r.code != 0 {
		h.t.Fatalf("events export: exit %d %s", r.code, r.stderr)
	}
	var out []logged
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e logged
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			h.t.Fatal(err)
		}
		e.line = sc.Text()
		keep := len(types) == 0 && (strings.HasPrefix(e.Type, "session.") || strings.HasPrefix(e.Type, "appserver.")) ||
			slices.Contains(types, "*")
		for _, ty := range types {
			keep = keep || e.Type == ty
		}
		if keep {
			out = append(out, e)
		}
	}
	return out
}

type sessionView struct {
	ID       string `json:"managed_session_id"`
	Thread   string `json:"bound_thread_id"`
	Epoch    uint64 `json:"session_epoch"`
	State    string `json:"session_state"`
	Mode     string `json:"mode"`
	Revision uint64 `json:"permission_snapshot_revision"`
	Instance string `json:"app_server_instance"`
	Reason   string `json:"epoch_reason"`
	Network  *bool  `json:"session_allows_network"`
}

func (h *homeDir) sessions() []sessionView {
	h.t.Helper()
	var out []sessionView
	h.ok(&out, "cli", "session", "list")
	return out
}

func (h *homeDir) session(thread string) sessionView {
	h.t.Helper()
	var in struct{ Session sessionView }
	h.ok(&in, "cli", "session", "inspect", "--thread-id", thread)
	return in.Session
}

// threadOfMarker is the thread a model call prompted by marker came from.
func (r *codexRig) threadOfMarker(marker string) string {
	for _, q := range r.model.Requests() {
		if !q.Title && strings.Contains(q.UserText, marker) {
			return q.ThreadID
		}
	}
	return ""
}

// execThread makes a thread with one turn in the rig's Codex home, the way
// a user's earlier Codex session would have, and returns its id.
func (r *codexRig) execThread(marker string) string {
	r.t.Helper()
	c := exec.Command(r.codex, "exec", "--skip-git-repo-check", "--json", marker+" an earlier conversation")
	c.Dir = r.project
	c.Env = codextest.Env(r.t, r.codexHome)
	out, err := c.Output()
	if err != nil {
		r.t.Fatalf("codex exec: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		var ev struct {
			Type     string `json:"type"`
			ThreadID string `json:"thread_id"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "thread.started" {
			return ev.ThreadID
		}
	}
	r.t.Fatalf("codex exec printed no thread.started:\n%s", out)
	return ""
}

func (r *codexRig) logEvents(what string) {
	r.t.Helper()
	var b strings.Builder
	for _, e := range r.events() {
		b.WriteString(e.line + "\n")
	}
	r.t.Logf("%s:\n%s", what, b.String())
}

// The managed sessions of `cbth cli run` against the real pinned Codex:
// the TUI on a terminal, the model a fake on loopback. One home, one
// shared app-server, in order: a new thread bound from thread/started, an
// earlier thread bound by id, each a session at epoch 1 bound to the
// thread the model saw; the app-server killed, restarted, every session
// at epoch 2; attaches refused for a profile mismatch and for a pending
// manual batch; the daemon restarted, the epoch advanced again on the
// next start of the app-server.
func TestCLIRun_RealCodex(t *testing.T) {
	t.Parallel()
	r := newCodexRig(t, "[delivery]\nmax_wait_window = \"0s\"\n")
	timeout := codextest.Guard

	// --new-thread: the session binds to the thread the TUI starts.
	tm := r.startTerminal(r.project, "cli", "run", "--new-thread")
	var a sessionView
	waitFor(t, "the new thread's session", timeout, func() bool {
		l := r.sessions()
		if len(l) == 1 {
			a = l[0]
		}
		return len(l) == 1
	})
	tm.waitText("Ask Codex", timeout)                                  // the TUI's prompt: it takes input now
	r.userTurn(tm, "[mark:new] hello from the terminal", "[mark:new]") // re-presses Enter if a loaded machine lost it
	waitFor(t, "the model to get the prompt", timeout, func() bool { return r.model.Count("[mark:new]") == 1 })
	waitFor(t, "the first permission reading", timeout, func() bool { return r.session(a.Thread).Revision >= 1 })
	tm.waitText("Worked for", timeout) // the turn is over
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run --new-thread exited %d", code)
	}
	a = r.session(a.Thread)
	if a.Thread != r.threadOfMarker("[mark:new]") || a.Epoch != 1 || a.Mode != "new_thread" || a.State != "detached" {
		t.Fatalf("new-thread session %+v; the model saw thread %s", a, r.threadOfMarker("[mark:new]"))
	}
	if !strings.Contains(tm.screen(), "managed session "+a.ID) {
		t.Errorf("cbth did not say which session it bound:\n%s", tail(tm.screen(), 2000))
	}

	// --bind-thread-id: a thread made earlier, outside cbth.
	thread := r.execThread("[mark:exec]")
	tm = r.startTerminal(r.project, "cli", "run", "--bind-thread-id", thread)
	var b sessionView
	waitFor(t, "the bound thread's session", timeout, func() bool {
		l := r.sessions()
		if len(l) == 2 {
			b = r.session(thread)
		}
		return len(l) == 2
	})
	if b.Thread != thread || b.Epoch != 1 || b.Mode != "bind_thread" || b.State != "live" || b.Revision != 1 {
		t.Fatalf("bound session %+v", b)
	}
	tm.waitText("an earlier conversation", timeout) // the TUI resumed the thread's history
	tm.waitText("Ask Codex", timeout)

	// A thread Codex does not have: ENOENT, nothing created.
	res := r.run("cli", "run", "--bind-thread-id", "01a20a66-0000-7000-8000-000000000000", "--json")
	if res.code != 1 || !strings.Contains(res.stdout, `"ENOENT"`) || len(r.sessions()) != 2 {
		t.Fatalf("bind an unknown thread: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}

	// Another profile while the foreground runs: refused; the same one: busy.
	res = r.run("cli", "run", "--bind-thread-id", thread, "--session-allows-network", "true", "--json")
	if res.code != 1 || !strings.Contains(res.stdout, `"session_profile_mismatch"`) {
		t.Fatalf("attach with another profile: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res = r.run("cli", "run", "--bind-thread-id", thread, "--json")
	if res.code != 1 || !strings.Contains(res.stdout, `"EBUSY"`) {
		t.Fatalf("a second foreground: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run --bind-thread-id exited %d", code)
	}
	r.logEvents("both sessions at epoch 1")

	// kill -9 of the app-server: the supervisor starts another, and every
	// session's epoch advances to 2.
	started := r.events("appserver.started")
	pid := int(started[len(started)-1].Payload["pid"].(float64))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the app-server's restart", timeout, func() bool { return len(r.events("appserver.started")) == 2 })
	for _, th := range []string{a.Thread, thread} {
		s := r.session(th)
		if s.Epoch != 2 || s.Reason != "app-server restarted: a new instance is a new event stream" {
			t.Fatalf("after kill -9 of the app-server: %+v", s)
		}
	}
	if ex := r.events("appserver.exited"); len(ex) != 1 || ex[0].Payload["reason"] != "exited" {
		t.Fatalf("the killed instance's end: %+v", ex)
	}

	// A manual batch of the thread: the session parks and refuses attach.
	r.ok(nil, "debug", "target", "--thread-id", thread, "unknown")
	r.ok(nil, "job", "complete", "--job-id", r.submitTo("debug", thread), "--summary", "done")
	waitFor(t, "the batch to park", timeout, func() bool { return r.session(thread).State == "parked" })
	res = r.run("cli", "run", "--bind-thread-id", thread, "--json")
	if res.code != 1 || !strings.Contains(res.stdout, `"session_pending_manual_resolution"`) {
		t.Fatalf("attach with a manual batch pending: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	r.ok(nil, "batch", "close-head", "--source-thread-id", thread, "--reason", "operator_closed_unconfirmed")
	waitFor(t, "the session to unpark", timeout, func() bool { return r.session(thread).State == "detached" })

	// A daemon restart: the next app-server start advances every epoch.
	r.ok(nil, "daemon", "stop")
	tm = r.startTerminal(r.project, "cli", "run", "--bind-thread-id", thread)
	waitFor(t, "the session to reattach", timeout, func() bool { return r.session(thread).State == "live" })
	tm.waitText("Ask Codex", timeout)
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run after the restart exited %d", code)
	}
	for _, th := range []string{a.Thread, thread} {
		s := r.session(th)
		if s.Epoch != 3 || s.Reason != "daemon restarted: the event stream cannot be proven continuous" {
			t.Fatalf("after a daemon restart: %+v", s)
		}
	}
	r.logEvents("the whole run")
}

// A codex whose app-server lacks one method delivery needs fails the
// probe: a managed `cbth cli run` refuses with ENOTSUP (exit 69) before
// any TUI starts, and says so; an exploratory one still runs, saying that
// auto-continuation is off.
func TestCLIRun_ProbeFailureRefusesManagedSessions(t *testing.T) {
	t.Parallel()
	h := fakeCodexHome(t, "FAKECODEX_DROP=turn/start")
	for _, args := range [][]string{{"--new-thread"}, {"--bind-thread-id", "01a20a4e-f876-7cc0-b8bf-dd76ccaba640"}} {
		res := h.run(append([]string{"cli", "run", "--json"}, args...)...)
		if res.code != 69 || !strings.Contains(res.stdout, `"ENOTSUP"`) || !strings.Contains(res.stderr, "turn/start") ||
			!strings.Contains(res.stderr, "capability probe") {
			t.Fatalf("cli run %v with turn/start missing: exit %d\n%s%s", args, res.code, res.stdout, res.stderr)
		}
	}
	if s := h.sessions(); len(s) != 0 {
		t.Fatalf("sessions were created: %+v", s)
	}
	st := h.events("appserver.started")
	if len(st) != 1 || st[0].Payload["probe_passed"] != false || fmt.Sprint(st[0].Payload["probe_missing"]) != "[turn/start]" {
		t.Fatalf("the recorded probe: %+v", st)
	}
	res := h.run("cli", "run")
	if res.code != 0 || !strings.Contains(res.stderr, "exploratory session") || !strings.Contains(res.stderr, "failed the capability probe") {
		t.Fatalf("exploratory run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

// fakeCodexHome is a home whose daemon runs the fake codex with env.
func fakeCodexHome(t *testing.T, env ...string) *homeDir {
	t.Helper()
	h := newHome(t, env...)
	// The app-server starts from an allow-listed environment: the
	// FAKECODEX_* settings reach it through [cli] pass_env.
	var names []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, strconv.Quote(k))
	}
	h.codexConfig(codextest.FakeCodex(t), filepath.Join(t.TempDir(), "codex-home"), "[cli]\npass_env = ["+strings.Join(names, ", ")+"]\n")
	return h
}

// The foreground holds an attached connection: the daemon counts it while
// cli run runs, and when the connection ends without a detach (cli run
// killed), the daemon detaches the session itself.
func TestCLIRun_KilledForegroundDetaches(t *testing.T) {
	t.Parallel()
	h := fakeCodexHome(t, "FAKECODEX_HOLD=1")
	const thread = "01a20a52-0ef8-7891-a797-cb8f3bedceb8"
	c := h.cmd("cli", "run", "--bind-thread-id", thread)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // cbth and its codex, killed together below
	var out strings.Builder
	c.Stdout = &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the session to be live", codextest.Guard, func() bool {
		l := h.sessions()
		return len(l) == 1 && l[0].State == "live"
	})
	if st := h.status(); !slices.Contains(st.Busy, "1 integration client") {
		t.Fatalf("the daemon does not count cli run as attached: %v", st.Busy)
	}
	syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	c.Wait()
	waitFor(t, "the daemon to detach the session", codextest.Guard, func() bool { return h.session(thread).State == "detached" })
	if d := h.events("session.detached"); len(d) != 1 || d[0].Payload["reason"] != "foreground connection closed" {
		t.Fatalf("detach: %+v", d)
	}
}

// A daemon killed with kill -9 leaves its app-server running (its own
// process group). The next daemon does not adopt it, since nothing proves
// the stream continuous: it records that instance ended, stops it (found
// by the pid the kernel reports on the home's socket, which the log
// recorded), starts its own, and every session moves to the next epoch.
func TestCLIRun_OrphanedAppServerTakenOver(t *testing.T) {
	t.Parallel()
	orphanTakenOver(t, fakeCodexHome(t), false)
}

// orphanTakenOver is TestCLIRun_OrphanedAppServerTakenOver on h; with
// throughChild, h's codex serves the app-server through a child.
func orphanTakenOver(t *testing.T, h *homeDir, throughChild bool) {
	t.Helper()
	const thread = "01a20a52-0ef8-7891-a797-cb8f3bedceb8"
	if r := h.run("cli", "run", "--bind-thread-id", thread); r.code != 0 {
		t.Fatalf("cli run: exit %d %s", r.code, r.stderr)
	}
	orphan := int(h.events("appserver.started")[0].Payload["pid"].(float64))
	if server, group := servingPID(t, filepath.Join(h.root, "run", "codex", "codex.sock")); (server != orphan) != throughChild || group != orphan {
		t.Fatalf("the app-server started as pid %d is served by pid %d of group %d", orphan, server, group)
	}
	daemon := h.pid()
	syscall.Kill(daemon, syscall.SIGKILL)
	waitFor(t, "the killed daemon to go", codextest.Guard, func() bool { return h.pid() == 0 })
	if err := syscall.Kill(orphan, 0); err != nil {
		t.Fatalf("the app-server did not outlive its daemon (%v): nothing to take over", err)
	}
	if r := h.run("cli", "run", "--bind-thread-id", thread); r.code != 0 {
		t.Fatalf("cli run after the daemon was killed: exit %d %s", r.code, r.stderr)
	}
	codextest.GroupGone(t, orphan)
	ex := h.events("appserver.exited")
	if len(ex) != 1 || ex[0].Payload["reason"] != "daemon_restarted" {
		t.Fatalf("the orphan's end: %+v", ex)
	}
	if s := h.session(thread); s.Epoch != 2 || s.Reason != "daemon restarted: the event stream cannot be proven continuous" {
		t.Fatalf("session after the takeover: %+v", s)
	}
}

// cbth cli run exits with codex's own status; a codex_binary that is not
// there is ENOTCONF (exit 69) before anything runs.
func TestCLIRun_ExitStatusAndMissingCodex(t *testing.T) {
	t.Parallel()
	h := fakeCodexHome(t, "FAKECODEX_EXIT=3")
	if r := h.run("cli", "run", "--bind-thread-id", "01a20a52-0ef8-7891-a797-cb8f3bedceb8"); r.code != 3 {
		t.Fatalf("codex exited 3, cbth cli run %d\n%s", r.code, r.stderr)
	}
	missing := newHome(t)
	missing.codexConfig(filepath.Join(t.TempDir(), "no-codex"), filepath.Join(t.TempDir(), "codex-home"), "")
	r := missing.run("cli", "run", "--new-thread", "--json")
	if r.code != 69 || !strings.Contains(r.stdout, `"ENOTCONF"`) {
		t.Fatalf("a missing codex: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A name the daemon's PATH lacks: the daemon keeps the PATH it was
	// started with, so the error says so and names the ways through.
	unfound := newHome(t)
	unfound.codexConfig("no-such-codex-cbth", filepath.Join(t.TempDir(), "codex-home"), "")
	r = unfound.run("cli", "run", "--new-thread")
	for _, want := range []string{"not on the daemon's PATH", "absolute path", "cbth daemon restart", "(ENOTCONF)"} {
		if r.code != 69 || !strings.Contains(r.stderr, want) {
			t.Errorf("codex_binary not on PATH: exit %d, want 69 and %q in\n%s", r.code, want, r.stderr)
		}
	}
}
