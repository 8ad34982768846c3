package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/codex/codexqueue"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// Desktop through Codex's queue (spec/desktop.md, "The queue transport"),
// on the pinned Codex: a thread of plain `codex` stands in for a Desktop
// thread, and Codex's own managed daemon (or a later `codex resume`)
// stands in for Codex Desktop's app-server, which shares the Codex home.

// queueConfig is cbth's config for these rigs: the queue validation's
// rollout read often, so a test waits on the proof, not on the interval.
const queueConfig = "[desktop]\nqueue_scan_interval = \"100ms\"\n"

// queueView is what these tests read of installation-state.
type queueView struct {
	Transports map[string]string `json:"writeback_transports"`
	Transport  string            `json:"writeback_transport"`
	Automatic  bool              `json:"automatic_continuation"`
	Proof      *struct {
		Thread  string `json:"thread_id"`
		Marker  string `json:"marker"`
		Item    string `json:"queued_item_id"`
		Home    string `json:"codex_home"`
		Current bool   `json:"current"`
	} `json:"queue_validation"`
	Failure *struct {
		Thread string `json:"thread_id"`
		Marker string `json:"marker"`
		Reason string `json:"reason"`
		Detail string `json:"detail"`
	} `json:"queue_validation_failure"`
}

// queueValidation is validate-queue's --json answer.
type queueValidation struct {
	Marker    string `json:"marker"`
	Item      string `json:"queued_item_id"`
	Rollout   string `json:"rollout_path"`
	Validated bool   `json:"validated"`
	Failure   *struct {
		Reason string `json:"reason"`
	} `json:"queue_validation_failure"`
}

// desktopThread makes a thread in plain `codex` whose turn has ended,
// quits the TUI, and sets it up as a Desktop thread on the queue path:
// the installation repaired (no heartbeat capability), the thread bound
// with no caller automation, and trusted with its own permissions.
func (u *userCodex) desktopThread(mark string) string {
	u.t.Helper()
	tm := u.tui()
	u.userTurn(tm, mark+" a Desktop thread", mark)
	thread := u.threadOfMarker(mark)
	tm.waitText("Worked for", codextest.Guard)
	if code := tm.quit(); code != 0 {
		u.t.Fatalf("codex exited %d", code)
	}
	u.ok(nil, "desktop", "installation-state", "repair", "--read-transport", "direct_file_read")
	u.queueBind(thread)
	return thread
}

// queueBind binds a thread for the queue (no caller automation) and
// trusts it with its own permissions.
func (u *userCodex) queueBind(thread string) {
	u.t.Helper()
	var b bindingView
	u.ok(&b, "desktop", "binding", "repair", "--source-thread-id", thread)
	if b.State != "bound" || b.Automation != "" {
		u.t.Fatalf("binding without automation: %+v", b)
	}
	u.ok(nil, "thread", "trust", "--thread-id", thread, "--own-permissions")
}

func (u *userCodex) queueState() queueView {
	u.t.Helper()
	var v queueView
	u.ok(&v, "desktop", "installation-state")
	return v
}

// queuedToCodex is the log's batch.queued_to_codex events of a thread's
// batches.
func (u *userCodex) queuedToCodex(thread string) []logged {
	u.t.Helper()
	ids := map[string]bool{}
	for _, b := range u.batches(thread) {
		ids[b.ID] = true
	}
	var out []logged
	for _, e := range u.events("batch.queued_to_codex") {
		if ids[e.Stream.ID] {
			out = append(out, e)
		}
	}
	return out
}

// drainedByQueue says whether the thread's rollout shows text drained
// from Codex's queue: the user message of a turn the queue triggered.
func (u *userCodex) drainedByQueue(thread, text string) bool {
	u.t.Helper()
	p, err := codexqueue.FindRollout(u.codexHome, thread)
	if err != nil {
		u.t.Fatal(err)
	}
	ok, err := (&codexqueue.DrainScan{Path: p, Marker: text}).Scan()
	if err != nil {
		u.t.Fatal(err)
	}
	return ok
}

// A Desktop installation on the queue transport, validated live: before
// the validation a result waits and is never queued; validate-queue puts
// a marker in Codex's queue for the bound thread, Codex's daemon drains
// it, and the proof is recorded; then the waiting result is handed to
// the queue once (the batch closed handoff_recorded naming the queued
// item), and Codex runs it as a queue-triggered turn, once; after cbth's
// daemon restarts, the user reopens the thread, whose agent hands a job
// over through MCP and is told the result comes through Codex's queue;
// it arrives as a new turn in the TUI, and the first result not again. A thread `codex exec` started is never queued for, bound and
// trusted as it is. Doctor says the transport is validated and in use.
func TestDesktopQueue_ValidatedInstallationHandsOffOnce(t *testing.T) {
	t.Parallel()
	u := newUserCodex(t, "approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n", queueConfig)
	thread := u.desktopThread("[mark:desk]")
	u.doctorSays("desktop.queue", "ok", "not validated")

	u.desktopJobSummary(thread, "[mark:first] the first result")
	waitFor(t, "the unvalidated transport to hold the result", codextest.Guard, func() bool {
		return len(u.batches(thread)) == 1 && strings.Contains(u.gateOf(thread), "queue writeback transport is not validated (cbth desktop validate-queue")
	})

	var val queueValidation
	u.ok(&val, "desktop", "validate-queue", "--source-thread-id", thread, "--wait")
	if !val.Validated || !strings.HasPrefix(val.Marker, "cbthq-") || val.Item == "" || val.Item == codexqueue.NotPrinted {
		t.Fatalf("validate-queue: %+v", val)
	}
	if u.model.Count(val.Marker) != 1 || u.threadOfMarker(val.Marker) != thread || !u.drainedByQueue(thread, val.Marker) {
		t.Fatalf("the marker reached the model %d times, from thread %q; drained by the queue: %t", u.model.Count(val.Marker), u.threadOfMarker(val.Marker), u.drainedByQueue(thread, val.Marker))
	}
	st := u.queueState()
	if st.Transport != "queue" || st.Transports["queue"] != "validated" || !st.Automatic || st.Proof == nil || !st.Proof.Current ||
		st.Proof.Marker != val.Marker || st.Proof.Home != u.codexHome || st.Proof.Item != val.Item {
		t.Fatalf("installation state after the validation: %+v %+v", st, st.Proof)
	}

	in := u.waitBatch(thread, "the waiting result to be handed to Codex's queue", func(in inspection) bool { return in.Batch.CloseReason == "handoff_recorded" })
	waitFor(t, "Codex to run the queued result", codextest.Guard, func() bool { return u.model.Count("[mark:first]") == 1 })
	q := u.queuedToCodex(thread)
	if len(q) != 1 || q[0].Payload["codex_home"] != u.codexHome {
		t.Fatalf("batch.queued_to_codex: %+v", q)
	}
	item, _ := q[0].Payload["queued_item_id"].(string)
	var detail struct {
		Batch struct {
			Detail string `json:"close_detail"`
		} `json:"batch"`
	}
	u.ok(&detail, "batch", "inspect", "--batch-id", in.Batch.ID)
	if item == "" || item == codexqueue.NotPrinted || !strings.Contains(detail.Batch.Detail, "queued as item "+item) || !strings.Contains(detail.Batch.Detail, "own permissions") {
		t.Fatalf("the hand-off names item %q: %q", item, detail.Batch.Detail)
	}
	if u.threadOfMarker("[mark:first]") != thread || !u.drainedByQueue(thread, "[mark:first]") {
		t.Fatal("the result did not come as a turn of the thread's queue")
	}
	u.doctorSays("desktop.queue", "ok", "validated and in use")

	// Once: after cbth's daemon restarts, only the next result goes. The
	// user opens the thread again and its agent hands a job over through
	// MCP: the answer says the result comes through Codex's queue, and it
	// arrives as a new turn in the open TUI.
	u.ok(nil, "daemon", "stop")
	u.model.Script("[mark:again] hand over a job",
		fakeprovider.Step{Query: "submit a background job"},
		fakeprovider.Step{Namespace: "mcp__cbth", Name: "job_submit", Args: `{"task_kind":"ci","summary":"the CI run","delivery_read_only":true,` +
			`"delivery_requires_approval":false,"delivery_requires_network":false,"delivery_requires_write_access":false}`})
	tm := u.tui("resume", thread)
	before := len(u.toolOutputs())
	u.userTurn(tm, "[mark:again] hand over a job", "[mark:again]")
	waitFor(t, "job_submit's answer", codextest.Guard, func() bool { return len(u.toolOutputs()) > before })
	out := u.toolOutputs()[before]
	var ans struct {
		JobID    string `json:"job_id"`
		Delivery struct {
			When string `json:"when"`
		} `json:"delivery"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &ans); err != nil || ans.Delivery.When != "through_codex_queue" {
		t.Fatalf("job_submit answered %s (%v)", out, err)
	}
	tm.waitText("Worked for", codextest.Guard)
	u.ok(nil, "job", "complete", "--job-id", ans.JobID, "--summary", "[mark:second] the second result")
	t.Cleanup(func() {
		if t.Failed() {
			for _, b := range u.batches(thread) {
				var in inspection
				u.ok(&in, "batch", "inspect", "--batch-id", b.ID)
				t.Logf("batch %s: %+v gate %q", b.ID, in.Batch, in.Gate)
			}
			for _, e := range u.events("*") {
				if strings.HasPrefix(e.Type, "attempt.") || strings.HasPrefix(e.Type, "batch.") || strings.HasPrefix(e.Type, "job.") {
					t.Logf("%s", e.line)
				}
			}
			t.Logf("screen: %s", tm.screen())
		}
	})
	waitFor(t, "Codex to run the second queued result", codextest.Guard, func() bool { return u.model.Count("[mark:second]") == 1 })
	waitFor(t, "the TUI to show it", codextest.Guard, func() bool {
		sc := tm.screen()
		return strings.Contains(sc, "[mark:second]") || strings.Contains(sc, "[mark:second]the")
	})
	if code := tm.quit(); code != 0 {
		t.Fatalf("codex resume exited %d", code)
	}
	if n := len(u.queuedToCodex(thread)); n != 2 || u.model.Count("[mark:first]") != 1 || u.model.Count("[mark:second]") != 1 {
		t.Fatalf("%d hand-offs; the results reached the model %d and %d times", n, u.model.Count("[mark:first]"), u.model.Count("[mark:second]"))
	}

	// A thread codex exec started: bound and trusted, its result waits
	// and is never queued.
	ex := u.execThread("[mark:exec]")
	u.queueBind(ex)
	u.desktopJobSummary(ex, "[mark:exec-result] never queued")
	waitFor(t, "the exec thread's result to be held", codextest.Guard, func() bool {
		return strings.Contains(u.gateOf(ex), "codex exec started thread "+ex)
	})
	if len(u.queuedToCodex(ex)) != 0 || u.model.Count("[mark:exec-result]") != 0 {
		t.Fatal("a result of a codex exec thread was queued")
	}
}

// A validation whose marker nobody drains within its window fails closed:
// recorded, the transport unavailable, nothing handed off (Codex's daemon
// is stopped, and no Codex has the thread open). When the user opens the
// thread later, Codex drains the marker, and the result, which was never
// queued, does not come with it. Before that, bad input queues nothing
// and appends nothing: a thread never bound, a window out of bounds, a
// thread `codex exec` started; and a `codex queue` that fails is
// recorded as a failed validation. Doctor reports the failure.
func TestDesktopQueue_NotDrainedFailsClosed(t *testing.T) {
	t.Parallel()
	u := newUserCodex(t, "approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n", queueConfig)
	thread := u.desktopThread("[mark:desk]")
	killDaemon(u.codexHome)

	head := u.head()
	for _, tc := range []struct {
		args []string
		code string
		says string
	}{
		{[]string{"--source-thread-id", "never-bound"}, "binding_or_capability_invalid", "not bound"},
		{[]string{"--source-thread-id", thread, "--window", "2h"}, "EINVAL", "--window"},
	} {
		f := u.fails(codextest.Guard, append([]string{"desktop", "validate-queue"}, tc.args...)...)
		if f.Code != tc.code || !strings.Contains(f.Message, tc.says) {
			t.Fatalf("validate-queue %v: %+v, want %s saying %q", tc.args, f, tc.code, tc.says)
		}
	}
	if u.head() != head {
		t.Fatal("a refused validation appended")
	}
	ex := u.execThread("[mark:exec]")
	u.queueBind(ex)
	head = u.head()
	if f := u.fails(codextest.Guard, "desktop", "validate-queue", "--source-thread-id", ex); f.Code != "EINVAL" || !strings.Contains(f.Message, "exec_thread") {
		t.Fatalf("validate-queue on a codex exec thread: %+v", f)
	}
	if u.head() != head || u.model.Count("cbthq-") != 0 {
		t.Fatal("the validation of a codex exec thread appended or queued")
	}

	// codex queue fails (a codex_binary that refuses as Codex does): the
	// failed validation is recorded; nothing was queued.
	refusing := filepath.Join(t.TempDir(), "codex")
	if err := os.WriteFile(refusing, []byte("#!/bin/sh\necho 'Error: failed to queue session message: thread/queue/add failed' >&2\nexit 1\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	u.ok(nil, "daemon", "stop")
	u.writeCodexConfig(refusing, u.codexHome, deliveryConfig+queueConfig)
	f := u.fails(codextest.Guard, "desktop", "validate-queue", "--source-thread-id", thread)
	u.ok(nil, "daemon", "stop")
	u.writeCodexConfig("codex", u.codexHome, deliveryConfig+queueConfig)
	if f.Code != "transient_not_ready" || !strings.Contains(f.Message, "queue_refused") || !strings.Contains(f.Message, "thread/queue/add failed") {
		t.Fatalf("validate-queue with codex queue failing: %+v", f)
	}
	if st := u.queueState(); st.Failure == nil || st.Failure.Reason != "queue_refused" || st.Transports["queue"] != "unavailable" {
		t.Fatalf("a refused validation is not recorded: %+v", st.Failure)
	}

	// Nothing drains it within the window.
	r := u.run("desktop", "validate-queue", "--source-thread-id", thread, "--window", "3s", "--wait", "--json")
	var val queueValidation
	if err := json.Unmarshal([]byte(r.stdout), &val); err != nil || r.code != 1 || val.Validated || val.Failure == nil || val.Failure.Reason != "not_drained" {
		t.Fatalf("validate-queue with no one to drain: exit %d %+v (%v)\n%s", r.code, val, err, r.stderr)
	}
	st := u.queueState()
	if st.Transport != "" || st.Transports["queue"] != "unavailable" || st.Automatic || st.Proof != nil || st.Failure.Marker != val.Marker {
		t.Fatalf("installation state after the failed validation: %+v", st)
	}
	if n := len(u.events("installation.queue_validation_failed")); n != 2 {
		t.Fatalf("%d failed validations recorded, want 2", n)
	}
	u.doctorSays("desktop.queue", "warn", "not_drained")

	u.desktopJobSummary(thread, "[mark:result] never queued")
	waitFor(t, "the result to wait for a validated transport", codextest.Guard, func() bool {
		return len(u.batches(thread)) == 1 && strings.Contains(u.gateOf(thread), "queue writeback transport is not validated (cbth desktop validate-queue")
	})
	// The user opens the thread: Codex drains what its queue holds, the
	// marker, and nothing of cbth's result.
	tm := u.tui("resume", thread)
	waitFor(t, "Codex to drain the marker", codextest.Guard, func() bool { return u.model.Count(val.Marker) == 1 })
	tm.waitText("Worked for", codextest.Guard)
	if code := tm.quit(); code != 0 {
		t.Fatalf("codex resume exited %d", code)
	}
	if u.model.Count("[mark:result]") != 0 || len(u.queuedToCodex(thread)) != 0 || len(u.events("attempt.accept_pending")) != 0 {
		t.Fatal("an unvalidated installation queued the result")
	}
	if st := u.queueState(); st.Transport != "" {
		t.Fatalf("a marker drained after its window validated the transport: %+v", st)
	}
}
