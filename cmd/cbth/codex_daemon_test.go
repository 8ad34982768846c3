package main_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// The Codex the user already runs (spec/codex-cli.md section 17): plain
// `codex`, the npm wrapper first on PATH, its TUI on a terminal and its
// own managed daemon; cbth's MCP server put in by `cbth mcp install`; no
// `cbth cli run` anywhere. Results come back through the daemon's socket.

// userCodex is that setup on a private Codex home and cbth home.
type userCodex struct {
	*codexRig
	wrapper string
}

// newUserCodex makes the homes: codexTop goes at the head of the Codex
// home's config.toml (its default permissions), cbth is cbth's config
// after the delivery rigs' own. The cleanup stops the managed daemon the
// TUI starts (both its processes, by pid) and removes its copy of Codex
// (about 400 MB) from the Codex home.
func newUserCodex(t *testing.T, codexTop, cbth string) *userCodex {
	t.Helper()
	r := newCodexRig(t, deliveryConfig+cbth)
	r.codexTop(codexTop)
	u := &userCodex{codexRig: r, wrapper: codextest.Wrapper(t)}
	u.env = append(u.env, "PATH="+filepath.Dir(u.wrapper)+string(os.PathListSeparator)+os.Getenv("PATH"))
	u.writeCodexConfig("codex", r.codexHome, deliveryConfig+cbth)
	u.ok(nil, "mcp", "install", "--codex-home", r.codexHome, "--approve", "task_run")
	t.Cleanup(func() { stopManagedDaemon(t, r.codexHome) })
	return u
}

// stopManagedDaemon stops the managed app-server daemon of a Codex home
// and its pid-update loop (killDaemon), and removes the daemon's
// packages.
func stopManagedDaemon(t *testing.T, codexHome string) {
	t.Helper()
	killDaemon(codexHome)
	if err := os.RemoveAll(filepath.Join(codexHome, "packages")); err != nil {
		t.Errorf("remove the managed daemon's packages: %v", err)
	}
}

// killDaemon stops the managed app-server daemon of a Codex home and its
// pid-update loop, by the pids Codex recorded.
func killDaemon(codexHome string) {
	for _, f := range []string{"daemon.pid", "daemon-updater.pid"} {
		b, err := os.ReadFile(filepath.Join(codexHome, "app-server-daemon", f))
		if err != nil {
			continue
		}
		var rec struct {
			PID int `json:"pid"`
		}
		if json.Unmarshal(b, &rec) != nil || rec.PID <= 1 {
			continue
		}
		_ = syscall.Kill(rec.PID, syscall.SIGTERM)
		deadline := time.Now().Add(5 * time.Second)
		for syscall.Kill(rec.PID, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		_ = syscall.Kill(rec.PID, syscall.SIGKILL)
	}
}

// codexEnv is the environment of the user's own codex: the Codex home,
// the same HOME and PATH as cbth's.
func (u *userCodex) codexEnv() []string {
	env := codextest.Env(u.t, u.codexHome)
	for _, kv := range u.env {
		if strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return env
}

// tui starts plain `codex` in the project, with args, as the user does.
func (u *userCodex) tui(args ...string) *terminal {
	u.t.Helper()
	c := exec.Command(u.wrapper, args...)
	c.Args[0] = "codex"
	c.Dir = u.project
	c.Env = u.codexEnv()
	tm := startOnPty(u.t, c)
	tm.waitText("Ask Codex", codextest.Guard)
	return tm
}

// daemonPID is the pid of the Codex home's managed daemon, from its pid
// file (0 when none runs).
func (u *userCodex) daemonPID() int {
	b, err := os.ReadFile(filepath.Join(u.codexHome, "app-server-daemon", "daemon.pid"))
	if err != nil {
		return 0
	}
	var rec struct {
		PID int `json:"pid"`
	}
	if json.Unmarshal(b, &rec) != nil || syscall.Kill(rec.PID, 0) != nil {
		return 0
	}
	return rec.PID
}

// turnContexts reads the permissions every turn of thread ran with from
// its rollout (turn_context records), in order.
func (u *userCodex) turnContexts(thread string) []string {
	u.t.Helper()
	var path string
	_ = filepath.WalkDir(filepath.Join(u.codexHome, "sessions"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(filepath.Base(p), thread) {
			path = p
		}
		return nil
	})
	if path == "" {
		u.t.Fatalf("no rollout of thread %s", thread)
	}
	f, err := os.Open(path)
	if err != nil {
		u.t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var rec struct {
			Type    string `json:"type"`
			Payload struct {
				ApprovalPolicy json.RawMessage `json:"approval_policy"`
				SandboxPolicy  json.RawMessage `json:"sandbox_policy"`
			} `json:"payload"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Type == "turn_context" {
			out = append(out, string(rec.Payload.ApprovalPolicy)+" "+string(rec.Payload.SandboxPolicy))
		}
	}
	return out
}

// A read-only session that never asks for approval, in plain `codex`:
// the agent hands its command to cbth through MCP and its turn ends; no
// model request is made while the command runs; the result comes back as
// a new turn of the same thread in the same TUI, once, with the output
// the command printed, not again after cbth's daemon restarts; and the
// user's next typed turn runs with the permissions the thread had.
func TestCodexDaemon_ReadOnlySessionGetsItsResult(t *testing.T) {
	t.Parallel()
	u := newUserCodex(t, "approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n", "[mcp]\ntask_allow = [[\"sh\", \"-c\", \"...\"]]\n")
	u.model.Script("run the tests in the background",
		fakeprovider.Step{Query: "run a command in the background"},
		fakeprovider.Step{Namespace: "mcp__cbth", Name: "task_run", Args: `{"argv":["sh","-c","sleep 2; echo all $((40+2))"],"summary":"the tests"}`})

	tm := u.tui()
	u.userTurn(tm, "run the tests in the background", "run the tests in the background")
	var answer string
	waitFor(t, "task_run's answer to reach the model", codextest.Guard, func() bool {
		for _, o := range u.toolOutputs() {
			if strings.Contains(o, "job_id") {
				answer = o
				return true
			}
		}
		return false
	})
	thread := u.threadOfMarker("run the tests in the background")
	waiting := len(u.model.Requests())
	if !strings.Contains(answer, `"when":"when_idle"`) || !strings.Contains(answer, "as a new turn") {
		t.Fatalf("task_run's answer does not say the result comes as a new turn: %s", answer)
	}
	if pid := u.daemonPID(); pid == 0 {
		t.Fatal("plain codex started no managed daemon")
	}

	var jobs []struct {
		Status string `json:"status"`
		Batch  *struct {
			CloseReason string `json:"close_reason"`
		} `json:"batch"`
	}
	waitFor(t, "the result to be delivered", codextest.Guard, func() bool {
		u.ok(&jobs, "job", "list", "--thread-id", thread)
		return len(jobs) == 1 && jobs[0].Batch != nil && jobs[0].Batch.CloseReason == "delivered"
	})
	if n := u.model.Count("all 42"); n != 1 || u.threadOfMarker("all 42") != thread {
		t.Fatalf("the result reached the model %d times (thread %s), want once in %s; the tool answered %s", n, u.threadOfMarker("all 42"), thread, answer)
	}
	// Zero tokens spent waiting: the first request after the tool's
	// answer is the delivered turn's.
	if reqs := u.model.Requests(); len(reqs) <= waiting || !strings.Contains(reqs[waiting].UserText, "all 42") {
		t.Fatalf("a model request was made while the command ran: %+v", reqs[waiting:])
	}
	waitFor(t, "the TUI to show the result", codextest.Guard, func() bool {
		// The capture loses the spaces the TUI moves the cursor over.
		sc := tm.screen()
		return strings.Contains(sc, "last output: all 42") || strings.Contains(sc, "lastoutput:all42")
	})
	var sessions []sessionView
	u.ok(&sessions, "cli", "session", "list")
	if len(sessions) != 1 || sessions[0].Thread != thread || sessions[0].Mode != "codex_daemon" || sessions[0].State != "detached" {
		t.Fatalf("the thread's session: %+v", sessions)
	}

	u.doctorSays("codex.daemon", "ok", "the running cbth daemon delivers through it")

	// Not again after cbth's daemon restarts: a later result of the same
	// thread goes through the new daemon (at the next epoch), and the
	// first one does not go with it.
	u.ok(nil, "daemon", "stop")
	u.complete(thread, "[mark:second] the second result")
	waitFor(t, "the second result to be delivered", codextest.Guard, func() bool { return u.model.Count("[mark:second]") == 1 })
	if n := u.model.Count("all 42"); n != 1 {
		t.Fatalf("the result went again after a restart: %d times", n)
	}
	u.ok(&sessions, "cli", "session", "list")
	if len(sessions) != 1 || sessions[0].Epoch != 2 {
		t.Fatalf("after cbth restarted, the session is %+v; want epoch 2", sessions)
	}

	// The user's next typed turn runs as the thread did before.
	u.userTurn(tm, "[mark:after] and now my own turn", "[mark:after]")
	waitFor(t, "the user's turn to end", codextest.Guard, func() bool { return len(u.turnContexts(thread)) >= 4 })
	ctxs := u.turnContexts(thread)
	for i, c := range ctxs {
		if c != ctxs[0] {
			t.Fatalf("turn %d ran with %s, the first with %s: the delivery changed the thread's permissions", i, c, ctxs[0])
		}
	}
	if !strings.Contains(ctxs[0], `"never"`) || !strings.Contains(ctxs[0], "read-only") {
		t.Fatalf("the thread's first turn ran with %s", ctxs[0])
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("codex exited %d", code)
	}
}

// gateOf is the delivery gate of the thread's head batch, as `batch
// inspect-head` shows it.
func (u *userCodex) gateOf(thread string) string {
	u.t.Helper()
	var in inspection
	u.ok(&in, "batch", "inspect-head", "--source-thread-id", thread)
	return in.Gate
}

// The session plain `codex` opens by default (workspace-write, approvals
// on request) is not strict-safe: its result is held, and the reason
// names the command that trusts the thread. The user quits the TUI (the
// managed daemon keeps the thread), trusts the thread from a shell, and
// the result goes with the thread's own permissions, once; `codex resume`
// shows it.
func TestCodexDaemon_TrustedThreadGetsItsResultAfterTheTUIQuit(t *testing.T) {
	t.Parallel()
	u := newUserCodex(t, "approval_policy = \"on-request\"\nsandbox_mode = \"workspace-write\"\n", "[mcp]\ntask_allow = [[\"sh\", \"-c\", \"...\"]]\n")
	u.model.Script("check the build",
		fakeprovider.Step{Query: "run a command in the background"},
		fakeprovider.Step{Namespace: "mcp__cbth", Name: "task_run", Args: `{"argv":["sh","-c","echo build $((6*7)) ok"],"summary":"the build"}`})

	tm := u.tui()
	u.userTurn(tm, "check the build", "check the build")
	thread := u.threadOfMarker("check the build")
	waitFor(t, "task_run's answer to reach the model", codextest.Guard, func() bool {
		for _, o := range u.toolOutputs() {
			if strings.Contains(o, "job_id") {
				if !strings.Contains(o, `"when":"held_until_trusted"`) || !strings.Contains(o, "cbth thread trust --thread-id "+thread+" --own-permissions") {
					t.Fatalf("task_run's answer does not say the result waits for the user's trust: %s", o)
				}
				return true
			}
		}
		return false
	})
	var gate string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last delivery gate: %s", gate)
		}
	})
	waitFor(t, "the result to be held for trust", codextest.Guard, func() bool {
		if len(u.batches(thread)) != 1 {
			return false
		}
		gate = u.gateOf(thread)
		return strings.Contains(gate, "cbth thread trust --thread-id "+thread+" --own-permissions")
	})
	if code := tm.quit(); code != 0 {
		t.Fatalf("codex exited %d", code)
	}
	if u.daemonPID() == 0 || u.model.Count("build 42 ok") != 0 {
		t.Fatalf("after the TUI quit: daemon pid %d, the result seen %d times", u.daemonPID(), u.model.Count("build 42 ok"))
	}

	var tr struct {
		Outcome string `json:"outcome"`
		Trust   string `json:"trust"`
		Source  string `json:"source"`
	}
	u.ok(&tr, "thread", "trust", "--thread-id", thread, "--own-permissions")
	if tr.Outcome != "trusted" || tr.Trust != "own_permissions" || tr.Source != "thread" {
		t.Fatalf("thread trust: %+v", tr)
	}
	waitFor(t, "the trusted thread's result to be delivered", codextest.Guard, func() bool { return u.model.Count("build 42 ok") == 1 })
	in := u.waitBatch(thread, "the batch to close delivered", closedDelivered)
	if in.Batch.CloseReason != "delivered" {
		t.Fatalf("batch: %+v", in.Batch)
	}
	ctxs := u.turnContexts(thread)
	if len(ctxs) != 2 || ctxs[0] != ctxs[1] || !strings.Contains(ctxs[1], "on-request") || !strings.Contains(ctxs[1], "workspace-write") {
		t.Fatalf("the turns ran with %q; the delivered one must repeat the thread's own", ctxs)
	}
	if u.events("thread.trusted")[0].Stream.ID != thread {
		t.Fatal("the trust is not an event of the thread")
	}
	var insp struct {
		Trust struct {
			Trust  string `json:"trust"`
			Source string `json:"source"`
		} `json:"thread_trust"`
	}
	u.ok(&insp, "batch", "inspect", "--batch-id", in.Batch.ID)
	if insp.Trust.Trust != "own_permissions" || insp.Trust.Source != "thread" {
		t.Fatalf("batch inspect's thread_trust: %+v", insp.Trust)
	}
	if r := u.run("thread", "history", "--source-thread-id", thread); !strings.Contains(r.stdout, "trust own_permissions (its own, since") {
		t.Fatalf("thread history does not show the trust:\n%s", r.stdout)
	}
	// A thread the Codex home does not have: its result waits, and says so.
	bogus := "01a2ffff-0000-7000-8000-000000000000"
	u.ok(nil, "thread", "trust", "--thread-id", bogus, "--own-permissions")
	u.complete(bogus, "[mark:nowhere] a result for no thread")
	waitFor(t, "the result for an unknown thread to wait, saying why", codextest.Guard, func() bool {
		gate = u.gateOf(bogus)
		return strings.Contains(gate, "ENOENT")
	})
	// The user comes back: the delivered turn is in the thread.
	tm = u.tui("resume", thread)
	waitFor(t, "codex resume to show the result", codextest.Guard, func() bool {
		sc := tm.screen()
		return strings.Contains(sc, "build 42 ok") || strings.Contains(sc, "build42ok")
	})
	if code := tm.quit(); code != 0 {
		t.Fatalf("codex resume exited %d", code)
	}
	if n := u.model.Count("build 42 ok"); n != 1 {
		t.Fatalf("the result reached the model %d times", n)
	}
}

// handOver makes a thread in a new TUI whose agent hands cbth a job that
// something outside will complete (MCP job_submit), quits the TUI, and
// returns the thread and the job.
func (u *userCodex) handOver(prompt string) (thread, job string) {
	u.t.Helper()
	u.model.Script(prompt,
		fakeprovider.Step{Query: "submit a background job"},
		fakeprovider.Step{Namespace: "mcp__cbth", Name: "job_submit", Args: `{"task_kind":"ci","summary":"the CI run"}`})
	tm := u.tui()
	before := len(u.toolOutputs())
	u.userTurn(tm, prompt, prompt)
	waitFor(u.t, "job_submit's answer", codextest.Guard, func() bool { return len(u.toolOutputs()) > before })
	var ans struct {
		JobID string `json:"job_id"`
	}
	out := u.toolOutputs()[before]
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &ans); err != nil || ans.JobID == "" {
		u.t.Fatalf("job_submit answered %q (%v)", u.toolOutputs()[before], err)
	}
	thread = u.threadOfMarker(prompt)
	// Quit once the turn has ended: a ^C during it interrupts it, and
	// Codex holds a thread's queue after an interrupted turn until the
	// user's next one.
	tm.waitText("Worked for", codextest.Guard)
	if code := tm.quit(); code != 0 {
		u.t.Fatalf("codex exited %d", code)
	}
	return thread, ans.JobID
}

// With Codex's daemon stopped, a result waits and says why, naming
// `codex resume`; a thread the user trusted with its own permissions is
// handed to Codex's own queue instead (queue_handoff on), its batch
// closed handoff_recorded, naming the queued item. When the user opens
// Codex again, Codex drains the queued item as a turn, once, and cbth
// delivers the other result itself, once. No model request is made while
// the results wait.
func TestCodexDaemon_DaemonStoppedWaitsOrHandsOffToTheQueue(t *testing.T) {
	t.Parallel()
	u := newUserCodex(t, "approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n", "queue_handoff = true\n")
	waiting, waitJob := u.handOver("[mark:wait] hand over a job")
	queued, queueJob := u.handOver("[mark:queue] hand over another job")
	u.ok(nil, "thread", "trust", "--thread-id", queued, "--own-permissions")
	killDaemon(u.codexHome)
	requests := len(u.model.Requests())

	u.ok(nil, "job", "complete", "--job-id", waitJob, "--summary", "waited: alpha 2")
	u.ok(nil, "job", "complete", "--job-id", queueJob, "--summary", "queued: beta 4")
	u.doctorSays("codex.daemon", "warn", "does not run")
	var gate string
	waitFor(t, "the strict thread's result to wait for the daemon", codextest.Guard, func() bool {
		gate = u.gateOf(waiting)
		return strings.Contains(gate, "does not run") && strings.Contains(gate, "codex resume "+waiting)
	})
	in := u.waitBatch(queued, "the trusted thread's result to be handed to Codex's queue", func(in inspection) bool { return in.Batch.CloseReason == "handoff_recorded" })
	var detail struct {
		Batch struct {
			Detail string `json:"close_detail"`
		} `json:"batch"`
	}
	u.ok(&detail, "batch", "inspect", "--batch-id", in.Batch.ID)
	if !strings.Contains(detail.Batch.Detail, "Codex's queue") || !strings.Contains(detail.Batch.Detail, "own permissions") {
		t.Fatalf("the hand-off does not say what it is: %q", detail.Batch.Detail)
	}
	if n := len(u.model.Requests()); n != requests {
		t.Fatalf("%d model requests while the results waited", n-requests)
	}

	// The user opens the queued thread: Codex drains its queue, and cbth
	// delivers the other thread's result once the daemon is back.
	tm := u.tui("resume", queued)
	waitFor(t, "Codex to drain the queued result", codextest.Guard, func() bool { return u.model.Count("queued: beta 4") == 1 })
	waitFor(t, "cbth to deliver the waiting result", codextest.Guard, func() bool { return u.model.Count("waited: alpha 2") == 1 })
	if u.threadOfMarker("queued: beta 4") != queued || u.threadOfMarker("waited: alpha 2") != waiting {
		t.Fatal("a result reached another thread")
	}
	u.waitBatch(waiting, "the waiting result's batch to close delivered", closedDelivered)
	if code := tm.quit(); code != 0 {
		t.Fatalf("codex resume exited %d", code)
	}
	if u.model.Count("queued: beta 4") != 1 || u.model.Count("waited: alpha 2") != 1 {
		t.Fatalf("a result went twice: queued %d, waited %d", u.model.Count("queued: beta 4"), u.model.Count("waited: alpha 2"))
	}
}

// A result delivered into a thread of the user's Codex is accepted, and
// its turn is being observed, when its stream is lost: cbth's own daemon
// is killed (kill -9), or later Codex's daemon is. Either way the batch
// is parked and the result never sent again; once an operator closes the
// parked head, the thread's next result goes as usual.
func TestCodexDaemon_LostStreamParksNeverResends(t *testing.T) {
	t.Parallel()
	u := newUserCodex(t, "approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n", "")
	tm := u.tui()
	u.userTurn(tm, "[mark:t] hello", "[mark:t]")
	thread := u.threadOfMarker("[mark:t]")
	tm.waitText("Worked for", codextest.Guard)
	defer u.model.Release()

	accepted := func(what string) {
		t.Helper()
		waitFor(t, what, codextest.Guard, func() bool {
			in := u.batchOf(thread)
			return in.Head != nil && in.Head.State == "cooldown"
		})
	}
	u.complete(thread, fakeprovider.MarkHang+" [mark:first] the first result")
	accepted("the first result's turn to be accepted")
	killed := u.pid()
	if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed daemon to go", codextest.Guard, func() bool { return syscall.Kill(killed, 0) != nil })
	first := u.waitBatch(thread, "the first batch to park after the restart", parked)
	u.ok(nil, "batch", "close-head", "--source-thread-id", thread, "--reason", "operator_closed_unconfirmed")
	u.model.Release() // the first turn ends: the thread is idle again

	u.complete(thread, fakeprovider.MarkHang+" [mark:second] the second result")
	waitFor(t, "the second result's turn to start", codextest.Guard, func() bool { return u.model.Count("[mark:second]") == 1 })
	second := u.nthBatch(thread, 2, "the second result to be accepted", func(in inspection) bool { return in.Head != nil && in.Head.State == "cooldown" })
	killDaemon(u.codexHome)
	u.nthBatch(thread, 2, "the second batch to park once Codex's daemon is gone", parked)
	u.ok(nil, "batch", "close-head", "--source-thread-id", thread, "--reason", "operator_closed_unconfirmed")
	u.model.Release()

	tm = u.tui("resume", thread)
	u.complete(thread, "[mark:third] the third result")
	waitFor(t, "the third result to be delivered", codextest.Guard, func() bool { return u.model.Count("[mark:third]") == 1 })
	if u.model.Count("[mark:first]") != 1 || u.model.Count("[mark:second]") != 1 {
		t.Fatalf("a result on a lost stream was sent again: first %d, second %d (batches %s, %s)",
			u.model.Count("[mark:first]"), u.model.Count("[mark:second]"), first.Batch.ID, second.Batch.ID)
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("codex resume exited %d", code)
	}
}

// doctorSays checks one of doctor's findings.
func (u *userCodex) doctorSays(id, state, detail string) {
	u.t.Helper()
	var rep struct {
		Checks []struct {
			ID     string `json:"id"`
			State  string `json:"state"`
			Detail string `json:"detail"`
		} `json:"checks"`
	}
	r := u.run("doctor", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		u.t.Fatalf("doctor --json: %v\n%s", err, r.stdout)
	}
	for _, c := range rep.Checks {
		if c.ID == id {
			if c.State != state || !strings.Contains(c.Detail, detail) {
				u.t.Fatalf("doctor's %s: %s %q, want %s %q", id, c.State, c.Detail, state, detail)
			}
			return
		}
	}
	u.t.Fatalf("doctor has no %s check", id)
}
