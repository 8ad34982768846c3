package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/codex/codextest"
)

// The Codex CLI target through the real binary, the real pinned Codex
// (app-server and TUI) and the fake model: the fault matrix of issue 13
// (spec/codex-cli.md section 16).

// deliveryConfig is the cbth config of the delivery rigs: batches go at
// once, and the CLI target's windows are short enough for a test.
const deliveryConfig = `[delivery]
max_wait_window = "0s"
min_send_interval = "0s"
eligible_backoff = "200ms"
eligible_backoff_max = "1s"
[cli]
reconcile_window = "10s"
settle_delay = "1s"
`

// newDeliveryRig is a codex rig whose threads run strict-safe (no
// approval, no network, read-only), the only permissions the default
// gate delivers into; codex, when not empty, replaces the pinned binary
// (the fault proxy).
func newDeliveryRig(t *testing.T, extra string) *codexRig {
	t.Helper()
	r := newCodexRig(t, deliveryConfig+extra)
	r.codexTop(`approval_policy = "never"` + "\n" + `sandbox_mode = "read-only"` + "\n")
	return r
}

// codexTop puts top-level keys at the head of the Codex home's
// config.toml (after a table they would belong to it).
func (r *codexRig) codexTop(keys string) {
	r.t.Helper()
	p := filepath.Join(r.codexHome, "config.toml")
	b, err := os.ReadFile(p)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, append([]byte(keys), b...), 0o600); err != nil {
		r.t.Fatal(err)
	}
}

// foreground binds a thread made earlier and runs its TUI until it takes
// input; the session is live.
func (r *codexRig) foreground(mark string) (string, *terminal) {
	r.t.Helper()
	thread := r.execThread(mark)
	tm := r.startTerminal(r.project, "cli", "run", "--bind-thread-id", thread)
	waitFor(r.t, "the session to be live", codextest.Guard, func() bool {
		for _, s := range r.sessions() {
			if s.Thread == thread && s.State == "live" {
				return true
			}
		}
		return false
	})
	tm.waitText("Ask Codex", codextest.Guard)
	return thread, tm
}

// complete submits a cli job for thread and completes it with summary.
func (r *codexRig) complete(thread, summary string) string {
	r.t.Helper()
	id := r.submit(thread)
	r.ok(nil, "job", "complete", "--job-id", id, "--summary", summary)
	return id
}

type cliHead struct {
	Batch struct {
		ID          string `json:"batch_id"`
		State       string `json:"state"`
		Replay      string `json:"replay_policy"`
		CloseReason string `json:"close_reason"`
		Count       int    `json:"delivery_attempt_count"`
	} `json:"batch"`
	Head *struct {
		State               string  `json:"state"`
		Marker              string  `json:"delivery_rpc_correlation_marker"`
		RPCState            string  `json:"delivery_rpc_state"`
		RPCKind             string  `json:"delivery_rpc_kind"`
		Rejected            int     `json:"rejected_rpc_request_count"`
		TurnID              string  `json:"delivery_turn_id"`
		ManagedSessionID    string  `json:"managed_session_id"`
		SessionEpoch        uint64  `json:"session_epoch"`
		ObservationState    string  `json:"delivery_observation_state"`
		ObservationDeadline *string `json:"delivery_observation_deadline"`
		AcceptedAt          *string `json:"delivery_accepted_at"`
		LastTurnEvent       *string `json:"last_observed_turn_event"`
		LastTurnEventAt     *string `json:"last_observed_turn_event_at"`
		EndReason           string  `json:"end_reason"`
	} `json:"head_attempt"`
	Gate string `json:"delivery_gate"`
}

// batchOf inspects the thread's only batch.
func (r *codexRig) batchOf(thread string) cliHead {
	r.t.Helper()
	bs := r.batches(thread)
	if len(bs) != 1 {
		r.t.Fatalf("thread %s has %d batches, want 1", thread, len(bs))
	}
	var in cliHead
	r.ok(&in, "batch", "inspect", "--batch-id", bs[0].ID)
	return in
}

func (r *codexRig) waitBatch(thread, what string, cond func(cliHead) bool) cliHead {
	r.t.Helper()
	var in cliHead
	waitFor(r.t, what, codextest.Guard, func() bool {
		if len(r.batches(thread)) != 1 {
			return false
		}
		in = r.batchOf(thread)
		return cond(in)
	})
	return in
}

func closedDelivered(in cliHead) bool { return in.Batch.CloseReason == "delivered" }
func parked(in cliHead) bool          { return in.Batch.Replay == "manual_resolution_only" }

// Delivered: the continuation reaches the model once, the TUI shows it
// (the prompt and the model's answer), the batch closes delivered, and
// the head attempt carries every CLI field of the seed.
func TestCLIDelivery_Delivered(t *testing.T) {
	r := newDeliveryRig(t, "")
	thread, tm := r.foreground("[mark:earlier]")
	r.complete(thread, "[mark:d1] the CI run passed")
	in := r.waitBatch(thread, "the batch to close delivered", closedDelivered)
	h := in.Head
	if h == nil || h.Marker == "" || h.TurnID == "" || h.ManagedSessionID != r.session(thread).ID || h.SessionEpoch != 1 ||
		h.RPCKind != "turn_start" || h.AcceptedAt == nil || h.ObservationDeadline == nil || h.LastTurnEvent == nil ||
		*h.LastTurnEvent != "turn_completed" || h.LastTurnEventAt == nil || in.Batch.Count != 1 {
		t.Fatalf("delivered batch %+v, head %+v", in.Batch, h)
	}
	if n := r.model.Count(h.Marker); n != 1 {
		t.Fatalf("the model got the marker %s in %d requests, want 1", h.Marker, n)
	}
	if r.threadOfMarker(h.Marker) != thread {
		t.Fatalf("the continuation went to thread %s, not %s", r.threadOfMarker(h.Marker), thread)
	}
	tm.waitText("ECHO:["+h.Marker+"]", codextest.Guard) // the TUI shows the continuation and its answer (the screen capture loses the spaces the TUI moves the cursor over)
	if !strings.Contains(tm.screen(), "[mark:d1] the CI run passed") {
		t.Fatalf("the TUI does not show the job's summary:\n%s", tail(tm.screen(), 3000))
	}
	if code := tm.quit(); code != 0 {
		t.Fatalf("cbth cli run exited %d", code)
	}
}
