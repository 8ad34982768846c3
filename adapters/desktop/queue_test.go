package desktop_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/codexqueue"
	"github.com/cbth-dev/cbth/adapters/desktop"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
)

// queueTarget is a Desktop target whose queue runs codexBody as codex, on
// a Codex home holding the rollouts of thread "vs" (a thread of the
// app-server) and "ex" (one codex exec started). The script records the
// message it was given in msg.
func queueTarget(t *testing.T, codexBody string) (tg *desktop.Target, msg string) {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "codex-home")
	for thread, source := range map[string]string{"vs": "vscode", "ex": "exec"} {
		d := filepath.Join(home, "sessions", "2026", "11", "28")
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		meta := `{"type":"session_meta","payload":{"id":"` + thread + `","source":"` + source + `"}}` + "\n"
		if err := os.WriteFile(filepath.Join(d, "rollout-2026-11-28T10-00-00-"+thread+".jsonl"), []byte(meta), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	msg = filepath.Join(dir, "msg")
	bin := filepath.Join(dir, "codex")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nprintf '%s' \"$5\" > "+msg+"\n"+codexBody+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	return &desktop.Target{Now: func() time.Time { return now }, Queue: &desktop.Queue{
		Command: codexqueue.Command{Codex: bin, Env: []string{"PATH=" + os.Getenv("PATH")}, CodexHome: home},
		Log:     slog.New(slog.DiscardHandler)}}, msg
}

var queueRoute = target.Gate{OK: true, Route: command.Route{RPCKind: command.RPCQueueAdd, DeliveryMode: command.ModeDesktopQueue}}

// Before a head goes to the queue, the thread's rollout is read: a thread
// Codex does not know waits (to be looked at again), one codex exec
// started waits for good, and any other gets the send. A head for a
// heartbeat is left as it was. Each way `codex queue` ends is the
// delivery outcome the core needs: the queued item is the hand-off; a
// refusal, or a codex that cannot run, is a proven reject; no end in
// time is unknown. What goes to the queue is the delivery's marker and
// summary.
func TestQueuePrepareAndSend(t *testing.T) {
	tg, _ := queueTarget(t, "echo 'Queued message item-1 for thread vs.'")
	heartbeat := target.Gate{OK: true}
	if g := tg.Prepare(context.Background(), target.Head{ThreadID: "vs"}, heartbeat); !g.OK || g.Send != nil {
		t.Fatalf("a heartbeat head: %+v", g)
	}
	if g := tg.Prepare(context.Background(), target.Head{ThreadID: "unknown"}, queueRoute); g.OK || g.Retry.IsZero() || !strings.Contains(g.Reason, "no rollout") {
		t.Fatalf("a thread Codex does not know: %+v", g)
	}
	if g := tg.Prepare(context.Background(), target.Head{ThreadID: "ex"}, queueRoute); g.OK || !g.Retry.IsZero() || !strings.Contains(g.Reason, "codex exec started thread ex") {
		t.Fatalf("a codex exec thread: %+v", g)
	}

	d := command.Delivery{ThreadID: "vs", BatchID: "b1", AttemptID: "a1", Marker: "cbth-0123", JobIDs: []string{"j1"}, Summary: "ci: green", ArtifactIDs: []string{"art-1"}}
	for _, tc := range []struct {
		name, body string
		timeout    time.Duration
		outcome    engine.Outcome
		handoff    string
		says       string
	}{
		{name: "queued", body: "echo 'Queued message item-1 for thread vs.'", outcome: command.Accepted, handoff: "item-1"},
		{name: "refused", body: "echo 'Error: failed to queue session message' >&2; exit 1", outcome: command.RejectedBefore, says: "Error: failed to queue session message"},
		{name: "no end in time", body: "exec sleep 5", timeout: 100 * time.Millisecond, outcome: command.AcceptanceUnknown, says: "may be queued"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg, msg := queueTarget(t, tc.body)
			g := tg.Prepare(context.Background(), target.Head{ThreadID: "vs"}, queueRoute)
			if !g.OK || g.Send == nil {
				t.Fatalf("prepare: %+v", g)
			}
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			r := g.Send(ctx, d)
			if r.Outcome != tc.outcome || r.Handoff != tc.handoff || !strings.Contains(r.Reason, tc.says) || r.Tracks {
				t.Fatalf("send: %+v; want %s, hand-off %q, reason with %q", r, tc.outcome, tc.handoff, tc.says)
			}
			if tc.handoff != "" && r.CodexHome != tg.Queue.Command.CodexHome {
				t.Fatalf("the hand-off names Codex home %q", r.CodexHome)
			}
			b, err := os.ReadFile(msg)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(b); got != desktop.Prompt(d) || !strings.HasPrefix(got, "[cbth-0123] ") || !strings.Contains(got, "ci: green") || !strings.Contains(got, "art-1") {
				t.Fatalf("queued %q", got)
			}
		})
	}

	tg.Queue.Command.Codex = filepath.Join(t.TempDir(), "no-codex")
	g := tg.Prepare(context.Background(), target.Head{ThreadID: "vs"}, queueRoute)
	if r := g.Send(context.Background(), d); r.Outcome != command.RejectedBefore || !strings.Contains(r.Reason, "codex queue not run") {
		t.Fatalf("codex missing: %+v", r)
	}
}
