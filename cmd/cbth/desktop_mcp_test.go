package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/internal/testkit/codextest"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// Codex Desktop through cbth's MCP tools, proven with real Codex
// sandboxes (spec/desktop.md, "Writeback transports"): the bridge and the
// caller heartbeats are threads of the pinned Codex's app-server, each
// wake a turn in its thread, read-only with approvals never; cbth's MCP
// server is in the Codex home because `cbth mcp install` put it there;
// the fake model makes the calls a heartbeat prompt asks for, reading each
// answer for the next call's arguments. Desktop's own part (arming the
// caller automation between note_arm_pending and note_arm, waking it) is
// the test's. No operator validated any writeback: only the live MCP
// validation did.

type desktopMCPRig struct {
	*homeDir
	t      *testing.T
	model  *fakeprovider.Server
	client *appserver.Client
	cwd    string
	wakes  atomic.Int64
	// kills counts the daemons killDaemon killed, and killed is the
	// last one's pid: the tests that rely on a kill check it happened.
	kills  atomic.Int64
	killed atomic.Int64
}

func newDesktopMCPRig(t *testing.T) *desktopMCPRig {
	t.Helper()
	model := fakeprovider.Start(fakeprovider.Codex, "")
	t.Cleanup(model.Close)
	h := liveDesktopHome(t, "")
	cfg, logPath := codextest.SupervisorConfig(t, model)
	var inst struct {
		Approved []string `json:"approved_tools"`
	}
	// The bridge heartbeat's preflight needs the user's approval under
	// approvals never.
	h.ok(&inst, "mcp", "install", "--codex-home", cfg.CodexHome, "--command", cbthBin, "--approve", "desktop_bridge_preflight")
	p := filepath.Join(cfg.CodexHome, "config.toml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, append([]byte("approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n"), b...), 0o600); err != nil {
		t.Fatal(err)
	}
	sup, err := supervisor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.StartTimeout)
	defer cancel()
	in, err := sup.Start(ctx)
	if err != nil {
		codextest.DumpLog(t, logPath)
		t.Fatalf("start app-server: %v", err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = sup.Stop(sctx)
		codextest.GroupGone(t, in.Identity.PID)
		if t.Failed() {
			codextest.DumpLog(t, logPath)
		}
	})
	r := &desktopMCPRig{homeDir: h, t: t, model: model, client: codextest.Connect(t, in.Socket), cwd: cfg.Cwd}
	// The installation's reading side validated by the operator; its
	// writeback by nobody yet.
	h.repair("--read-transport", "direct_file_read", "--read-transport-capability", "validated")
	return r
}

// thread starts a Codex thread with one turn, so it has a rollout.
func (r *desktopMCPRig) thread() string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), codextest.Guard)
	defer cancel()
	th, err := r.client.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.cwd})
	if err != nil {
		r.t.Fatal(err)
	}
	r.turn(th.Thread.ID, "[mark:hello] hello")
	return th.Thread.ID
}

// turn runs one turn of thread with prompt to its end and returns the
// tool outputs the model read in it, JSON answers unwrapped.
func (r *desktopMCPRig) turn(thread, prompt string) []string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), codextest.Guard)
	defer cancel()
	seen := len(r.model.Requests())
	sub := r.client.Subscribe()
	defer sub.Close()
	turn, err := r.client.TurnStart(ctx, appserver.TurnStartParams{ThreadID: thread, Input: []appserver.Input{appserver.TextInput(prompt)}})
	if err != nil {
		r.t.Fatalf("turn/start: %v", err)
	}
	for done := false; !done; {
		select {
		case m, ok := <-sub.C():
			if !ok {
				r.t.Fatalf("app-server subscription ended: %v", sub.Err())
			}
			var n appserver.TurnNote
			done = m.Method == appserver.NoteTurnCompleted && json.Unmarshal(m.Params, &n) == nil && n.Turn.ID == turn.ID
		case <-ctx.Done():
			r.t.Fatalf("turn %q did not end", prompt)
		}
	}
	var outs []string
	for _, q := range r.model.Requests()[seen:] {
		if q.UserText == prompt && q.ThreadID == thread && len(q.OutputTexts) > len(outs) {
			outs = q.OutputTexts
		}
	}
	for i, o := range outs {
		if _, after, ok := strings.Cut(o, "Output:\n"); ok {
			outs[i] = after
		}
	}
	return outs
}

// answer decodes a tool output (its structured content) into v; it
// reports the error code when the tool refused.
func answer(out string, v any) (code string) {
	if _, after, ok := strings.Cut(out, "Output:\n"); ok {
		out = after // Codex's wrapping of a tool's output
	}
	var e struct {
		Error *struct{ Code string } `json:"error"`
	}
	if json.Unmarshal([]byte(out), &e) == nil && e.Error != nil {
		return e.Error.Code
	}
	_ = json.Unmarshal([]byte(out), v)
	return ""
}

func call(name string, args any) string {
	b, _ := json.Marshal(args)
	return fakeprovider.MarkMCP + " mcp__cbth/" + name + " " + string(b)
}

// validateMCP proves the transport: `cbth desktop validate-mcp` prints a
// prompt; a Desktop thread's model calls the tool it names.
func (r *desktopMCPRig) validateMCP() {
	r.t.Helper()
	var req struct {
		Token  string `json:"token"`
		Prompt string `json:"prompt"`
	}
	r.ok(&req, "desktop", "validate-mcp")
	if !strings.Contains(req.Prompt, req.Token) || !strings.Contains(req.Prompt, "desktop_validate_mcp") {
		r.t.Fatalf("validate-mcp printed %+v", req)
	}
	outs := r.turn(r.thread(), call("desktop_validate_mcp", map[string]string{"token": req.Token}))
	var v struct{ Outcome string }
	if len(outs) != 1 || answer(outs[0], &v) != "" || v.Outcome != "validated" {
		r.t.Fatalf("desktop_validate_mcp: %q", outs)
	}
	var inst struct {
		Transports map[string]string `json:"writeback_transports"`
		Transport  string            `json:"writeback_transport"`
		Automatic  bool              `json:"automatic_continuation"`
	}
	r.ok(&inst, "desktop", "installation-state")
	if inst.Transports["mcp"] != "validated" || inst.Transport != "mcp" || inst.Transports["relay"] != "unknown" || !inst.Automatic {
		r.t.Fatalf("after the validation: %+v", inst)
	}
}

// token is the caller prompt token desktop_claim_next_ready gives.
type token struct {
	SourceThreadID   string `json:"source_thread_id"`
	BatchID          string `json:"batch_id"`
	AttemptID        string `json:"attempt_id"`
	Generation       uint64 `json:"generation"`
	SnapshotRevision uint64 `json:"snapshot_revision"`
}

// bridgeWake is one bridge heartbeat turn in bridge: preflight, claim,
// note_arm_pending, note_arm, each call's arguments read from the answers
// before it. before[i], when set, runs just before step i (the test's
// crashes). It returns the outputs and the token it armed (zero if none).
func (r *desktopMCPRig) bridgeWake(bridge string, before map[int]func()) ([]string, token) {
	return r.bridgeWakeUpTo(bridge, 4, before)
}

// bridgeWakeUpTo is a bridge wake that stops after its first n steps.
func (r *desktopMCPRig) bridgeWakeUpTo(bridge string, n int, before map[int]func()) ([]string, token) {
	r.t.Helper()
	w := r.wakes.Add(1)
	prompt := fmt.Sprintf("bridge heartbeat wake #%d.", w)
	req := fmt.Sprintf("bridge-req-%d", w)
	claimed := func(outs []string) (tok token, ok bool) {
		var c struct{ Ready *token }
		if len(outs) < 2 || answer(outs[1], &c) != "" || c.Ready == nil {
			return tok, false
		}
		return *c.Ready, true
	}
	steps := []fakeprovider.Step{
		{Namespace: "mcp__cbth", Name: "desktop_bridge_preflight", Args: "{}"},
		{Namespace: "mcp__cbth", Name: "desktop_claim_next_ready", Args: "{}"},
		{Namespace: "mcp__cbth", Name: "desktop_note_arm_pending", ArgsFrom: func(outs []string) string {
			tok, ok := claimed(outs)
			if !ok {
				return ""
			}
			b, _ := json.Marshal(map[string]any{"source_thread_id": tok.SourceThreadID, "attempt_id": tok.AttemptID,
				"generation": tok.Generation, "bridge_request_id": req})
			return string(b)
		}},
		{Namespace: "mcp__cbth", Name: "desktop_note_arm", ArgsFrom: func(outs []string) string {
			tok, ok := claimed(outs)
			var p struct {
				Lease string `json:"bridge_arm_lease_id"`
			}
			if !ok || len(outs) < 3 || answer(outs[2], &p) != "" || p.Lease == "" {
				return ""
			}
			// Here Desktop's automation_update armed the caller heartbeat.
			b, _ := json.Marshal(map[string]any{"source_thread_id": tok.SourceThreadID, "attempt_id": tok.AttemptID,
				"generation": tok.Generation, "bridge_request_id": req, "bridge_arm_lease_id": p.Lease})
			return string(b)
		}},
	}
	for i, f := range before {
		steps[i].Before = f
	}
	r.model.Script(prompt, steps[:n]...)
	outs := r.turn(bridge, prompt)
	tok, _ := claimed(outs)
	return outs, tok
}

// callerWake is the caller heartbeat's turn in thread with tok's prompt.
// It returns the crossing's answer, or the code of its refusal.
func (r *desktopMCPRig) callerWake(thread string, tok token) (summary, code string) {
	r.t.Helper()
	return r.crossFrom(thread, map[string]any{"batch_id": tok.BatchID, "attempt_id": tok.AttemptID,
		"generation": tok.Generation, "expected_snapshot_revision": tok.SnapshotRevision})
}

func (r *desktopMCPRig) crossFrom(thread string, args map[string]any) (summary, code string) {
	r.t.Helper()
	outs := r.turn(thread, call("desktop_note_boundary_crossed", args))
	if len(outs) != 1 {
		r.t.Fatalf("the caller's wake made %d calls", len(outs))
	}
	var rep struct {
		Outcome      string
		Continuation struct{ Summary string }
	}
	if code := answer(outs[0], &rep); code != "" {
		return "", code
	}
	return rep.Continuation.Summary, ""
}

// source is a bound Desktop thread with a low-risk result waiting.
func (r *desktopMCPRig) source(mark string) string {
	r.t.Helper()
	s := r.thread()
	r.bind(s, "caller-"+s)
	r.desktopJobSummary(s, mark)
	return s
}

func (h *homeDir) desktopJobSummary(thread, summary string) {
	h.t.Helper()
	var res struct {
		JobID string `json:"job_id"`
	}
	h.ok(&res, "job", "submit", "--target", "desktop", "--thread-id", thread, "--task-kind", "ci", "--summary", "wait",
		"--delivery-read-only", "true", "--delivery-requires-approval", "false", "--delivery-requires-network", "false",
		"--delivery-requires-write-access", "false")
	h.ok(nil, "job", "complete", "--job-id", res.JobID, "--summary", summary)
}

// handedOver counts the continuations carrying mark that reached a
// model: each tool output is new in exactly one request, the one right
// after the call, as its last.
func (r *desktopMCPRig) handedOver(mark string) int {
	n := 0
	for _, q := range r.model.Requests() {
		if k := len(q.OutputTexts); k > 0 && strings.Contains(q.OutputTexts[k-1], `"continuation"`) && strings.Contains(q.OutputTexts[k-1], mark) {
			n++
		}
	}
	return n
}

func (r *desktopMCPRig) closeReason(thread string) string {
	r.t.Helper()
	bs := r.batches(thread)
	if len(bs) != 1 {
		r.t.Fatalf("thread %s has %d batches", thread, len(bs))
	}
	var in inspection
	r.ok(&in, "batch", "inspect", "--batch-id", bs[0].ID)
	return in.Batch.CloseReason
}

// killDaemon kills the daemon with SIGKILL: the next tool call starts
// another, as every command does.
func (r *desktopMCPRig) killDaemon() {
	pid := r.pid()
	if pid <= 0 {
		r.t.Errorf("kill -9 of the daemon: no daemon runs")
		return
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		r.t.Errorf("kill -9 of the daemon %d: %v", pid, err)
		return
	}
	waitFor(r.t, "the killed daemon to go", 10*time.Second, func() bool { return r.pid() == 0 })
	r.killed.Store(int64(pid))
	r.kills.Add(1)
}

// killedOnce checks that since kills read before, killDaemon killed one
// daemon and another serves now: what follows a kill ran on a new one.
func (r *desktopMCPRig) killedOnce(before int64) {
	r.t.Helper()
	if n := r.kills.Load() - before; n != 1 {
		r.t.Fatalf("the daemon was killed %d times, want once", n)
	}
	if pid := r.pid(); pid == 0 || int64(pid) == r.killed.Load() {
		r.t.Fatalf("after the kill of %d the daemon is %d, want a new one", r.killed.Load(), pid)
	}
}

func TestDesktopMCP_RealCodexThreads(t *testing.T) {
	t.Parallel()
	r := newDesktopMCPRig(t)
	bridgeT := r.thread()

	// Before the live validation nothing is armed: the mcp transport is
	// not assumed validated, and no other writeback is.
	s0 := r.source("[mark:unvalidated]")
	if _, tok := r.bridgeWake(bridgeT, nil); tok.BatchID != "" {
		t.Fatalf("an unvalidated installation offered %+v", tok)
	}
	r.validateMCP()

	t.Run("the whole flow, once", func(t *testing.T) {
		outs, tok := r.bridgeWake(bridgeT, nil)
		if tok.SourceThreadID != s0 || len(outs) != 4 {
			t.Fatalf("the bridge's wake: %q", outs)
		}
		if sum, code := r.callerWake(s0, tok); code != "" || !strings.Contains(sum, "[mark:unvalidated]") {
			t.Fatalf("the crossing: %q %s", sum, code)
		}
		// A second wake of the caller, or its lost answer retried.
		if _, code := r.callerWake(s0, tok); code != "already_crossed_or_handoff_recorded" {
			t.Fatalf("a second crossing: %s", code)
		}
		if n := r.handedOver("[mark:unvalidated]"); n != 1 || r.closeReason(s0) != "handoff_recorded" {
			t.Fatalf("handed over %d times, batch %s", n, r.closeReason(s0))
		}
	})

	t.Run("a thread that is not the bound source thread", func(t *testing.T) {
		s := r.source("[mark:wrongcaller]")
		_, tok := r.bridgeWake(bridgeT, nil)
		other := r.thread()
		// The caller's prompt pasted into another thread: refused, it
		// names a thread that is not the caller.
		if _, code := r.crossFrom(other, map[string]any{"source_thread_id": s, "batch_id": tok.BatchID, "attempt_id": tok.AttemptID,
			"generation": tok.Generation, "expected_snapshot_revision": tok.SnapshotRevision}); code != "thread_mismatch" {
			t.Fatalf("another thread's crossing naming the source thread: %s", code)
		}
		// Without the name, it would cross its own boundary: it has none.
		if _, code := r.callerWake(other, tok); code != "stale_or_superseded" {
			t.Fatalf("another thread's crossing: %s", code)
		}
		if _, code := r.callerWake(s, tok); code != "" {
			t.Fatalf("the bound thread's crossing after it: %s", code)
		}
		if n := r.handedOver("[mark:wrongcaller]"); n != 1 {
			t.Fatalf("handed over %d times", n)
		}
	})

	for step, name := range []string{"preflight", "claim", "arm-pending", "arm"} {
		t.Run("the daemon killed after "+name, func(t *testing.T) {
			mark := "[mark:crash-" + name + "]"
			s := r.source(mark)
			kills := r.kills.Load()
			var tok token
			if step < 3 {
				_, tok = r.bridgeWake(bridgeT, map[int]func(){step + 1: r.killDaemon})
			} else {
				_, tok = r.bridgeWake(bridgeT, nil)
				r.killDaemon()
			}
			if tok.SourceThreadID != s {
				t.Fatalf("claimed %+v", tok)
			}
			if _, code := r.callerWake(s, tok); code != "" {
				t.Fatalf("the crossing: %s", code)
			}
			r.killedOnce(kills)
			if n := r.handedOver(mark); n != 1 || r.closeReason(s) != "handoff_recorded" {
				t.Fatalf("handed over %d times", n)
			}
		})
	}

	t.Run("the answer of the crossing lost", func(t *testing.T) {
		s := r.source("[mark:lost]")
		_, tok := r.bridgeWake(bridgeT, nil)
		crossing := call("desktop_note_boundary_crossed", map[string]any{"batch_id": tok.BatchID, "attempt_id": tok.AttemptID,
			"generation": tok.Generation, "expected_snapshot_revision": tok.SnapshotRevision})
		// The daemon dies after the crossing committed; the retry meets a
		// new daemon and the record of the first.
		prompt := "caller heartbeat retrying its crossing"
		r.model.Script(prompt, fakeprovider.Step{Namespace: "mcp__cbth", Name: "desktop_note_boundary_crossed", Args: strings.SplitN(crossing, " ", 3)[2]},
			fakeprovider.Step{Namespace: "mcp__cbth", Name: "desktop_note_boundary_crossed", Args: strings.SplitN(crossing, " ", 3)[2], Before: r.killDaemon})
		kills := r.kills.Load()
		outs := r.turn(s, prompt)
		r.killedOnce(kills)
		var v struct{}
		if len(outs) != 2 || answer(outs[0], &v) != "" || answer(outs[1], &v) != "already_crossed_or_handoff_recorded" {
			t.Fatalf("crossing, then its retry: %q", outs)
		}
		if n := r.handedOver("[mark:lost]"); n != 1 {
			t.Fatalf("handed over %d times", n)
		}
	})

	t.Run("a stale generation", func(t *testing.T) {
		s := r.source("[mark:stale]")
		_, old := r.bridgeWake(bridgeT, nil)
		// The operator replaces the caller automation: a fresh attempt
		// and generation; the old automation's wake is stale.
		r.bind(s, "caller-replaced-"+s)
		if _, code := r.callerWake(s, old); code != "stale_or_superseded" {
			t.Fatalf("the old generation's crossing: %s", code)
		}
		if n := r.handedOver("[mark:stale]"); n != 0 {
			t.Fatalf("handed over %d times", n)
		}
		// The new generation is armed at the next wake and crosses once.
		_, fresh := r.bridgeWake(bridgeT, nil)
		if fresh.SourceThreadID != s || fresh.Generation == old.Generation {
			t.Fatalf("the fresh arm: %+v after %+v", fresh, old)
		}
		if _, code := r.callerWake(s, fresh); code != "" {
			t.Fatalf("the fresh crossing: %s", code)
		}
		if n := r.handedOver("[mark:stale]"); n != 1 {
			t.Fatalf("handed over %d times", n)
		}
	})

	t.Run("two bridges", func(t *testing.T) {
		s := r.source("[mark:twobridges]")
		other := r.thread()
		// Another thread's preflight does not take the bridge over: a
		// bridge moves only by the operator's hand (issue 34).
		forged := r.turn(other, call("desktop_bridge_preflight", map[string]any{}))
		var none struct{}
		if len(forged) != 1 || answer(forged[0], &none) != "thread_mismatch" {
			t.Fatalf("another thread's preflight: %q", forged)
		}
		// The operator moves the bridge there; it wakes and stops after
		// the arm barrier.
		r.ok(nil, "desktop", "bridge-preflight", "--bridge-thread-id", other)
		outs, tok := r.bridgeWakeUpTo(other, 3, nil)
		var p struct {
			Lease string `json:"bridge_arm_lease_id"`
		}
		if tok.SourceThreadID != s || len(outs) != 3 || answer(outs[2], &p) != "" {
			t.Fatalf("the other bridge's wake (want %s): %+v %d %q", s, tok, len(outs), outs[len(outs)-1])
		}
		// The operator moves it back and the first bridge wakes: the
		// snapshots are its again, and the other's late note_arm is
		// refused, whatever lease it holds.
		r.ok(nil, "desktop", "bridge-preflight", "--bridge-thread-id", bridgeT)
		r.bridgeWakeUpTo(bridgeT, 1, nil)
		late := r.turn(other, call("desktop_note_arm", map[string]any{"source_thread_id": tok.SourceThreadID, "attempt_id": tok.AttemptID,
			"generation": tok.Generation, "bridge_request_id": fmt.Sprintf("bridge-req-%d", r.wakes.Load()-1), "bridge_arm_lease_id": p.Lease}))
		var v struct{}
		if len(late) != 1 || answer(late[0], &v) != "thread_mismatch" {
			t.Fatalf("the other bridge's late arm: %q", late)
		}
		// The bridge settles the pending arm it finds: never effective.
		prompt := "bridge heartbeat settles the pending arm"
		r.model.Script(prompt, fakeprovider.Step{Namespace: "mcp__cbth", Name: "desktop_list_arm_pending", Args: "{}"},
			fakeprovider.Step{Namespace: "mcp__cbth", Name: "desktop_note_paused", ArgsFrom: func(outs []string) string {
				var l struct {
					Entries []struct {
						SourceThreadID  string `json:"source_thread_id"`
						Generation      uint64 `json:"generation"`
						BridgeRequestID string `json:"bridge_request_id"`
					}
				}
				if answer(outs[0], &l) != "" || len(l.Entries) != 1 {
					return ""
				}
				b, _ := json.Marshal(map[string]any{"source_thread_id": l.Entries[0].SourceThreadID, "generation": l.Entries[0].Generation,
					"bridge_request_id": l.Entries[0].BridgeRequestID})
				return string(b)
			}})
		settled := r.turn(bridgeT, prompt)
		var paused struct{ Outcome string }
		if len(settled) != 2 || answer(settled[1], &paused) != "" || paused.Outcome != "arm_abandoned" {
			t.Fatalf("settling the other bridge's arm: %q", settled)
		}
		// The next wake arms a fresh attempt; the caller crosses once.
		_, fresh := r.bridgeWake(bridgeT, nil)
		if fresh.SourceThreadID != s || fresh.AttemptID == tok.AttemptID {
			t.Fatalf("the fresh arm: %+v after %+v", fresh, tok)
		}
		if _, code := r.callerWake(s, tok); code != "stale_or_superseded" {
			t.Fatalf("the abandoned attempt's crossing: %s", code)
		}
		if _, code := r.callerWake(s, fresh); code != "" {
			t.Fatalf("the crossing: %s", code)
		}
		if n := r.handedOver("[mark:twobridges]"); n != 1 {
			t.Fatalf("handed over %d times", n)
		}
	})
}
