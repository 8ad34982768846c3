package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Retries that end loudly (issue 18 item 7), through the real binary on
// a manual clock: a thread whose deliveries are all rejected before
// acceptance is retried on a doubling back-off with jitter up to its
// cap, so a 24 h redelivery window holds a few dozen tries, not one a
// minute; and the close that gives the batch up is as loud as a park.

// rejectInspection is the part of `batch inspect` these tests read.
type rejectInspection struct {
	Batch struct {
		State         string     `json:"state"`
		CloseReason   string     `json:"close_reason"`
		EligibleAfter *time.Time `json:"eligible_after"`
		WindowEndsAt  time.Time  `json:"redelivery_window_ends_at"`
		Notified      bool       `json:"park_notified"`
	} `json:"batch"`
	HeadAttempt *struct {
		Rejected []string `json:"rejected_rpc_request_ids"`
	} `json:"head_attempt"`
}

// rejects reads a batch's inspection over the socket (the loop below
// asks once per try).
func (h *homeDir) rejects(batch string) rejectInspection {
	h.t.Helper()
	var in rejectInspection
	if err := callOpArgs(h.root, "batch.inspect", map[string]string{"batch_id": batch}, &in); err != nil {
		h.t.Fatal(err)
	}
	return in
}

// advanceBy moves the manual clock over the socket (a loop of CLI
// processes would cost a process each) and returns the new now.
func (h *homeDir) advanceBy(d time.Duration) time.Time {
	h.t.Helper()
	var rep struct {
		Now time.Time `json:"now"`
	}
	if err := callOpArgs(h.root, "debug.clock.advance", map[string]string{"by": d.String()}, &rep); err != nil {
		h.t.Fatal(err)
	}
	return rep.Now
}

// undeliveredHook is a park hook that appends its environment to a file.
func undeliveredHook(t *testing.T) (config, out string) {
	out = filepath.Join(t.TempDir(), "hook.out")
	return "!park_hook = [\"sh\", \"-c\", \"echo $CBTH_NOTICE $CBTH_REASON $CBTH_BATCH_ID $CBTH_THREAD_ID $CBTH_JOB_IDS >> " + out + "\"]", out
}

func TestRejects_BackOffToTheCapAndTheCloseIsLoud(t *testing.T) {
	t.Parallel()
	const (
		base, limit = time.Minute, time.Hour
		jitter      = 0.2
		window      = 24 * time.Hour
	)
	hook, hookOut := undeliveredHook(t)
	h := deliveryHome(t, hook+"\nmax_wait_window = \"0s\"\nredelivery_window = \"24h\"\neligible_backoff = \"1m\"\n"+
		"eligible_backoff_max = \"1h\"\neligible_backoff_jitter = 0.2")
	h.behave("T", "reject")
	job := h.ready("T")
	batch := h.batches("T")[0].ID
	first := h.status().LogHeadSeq

	// Each back-off is the doubling wait for its reject, capped, less at
	// most its jitter share: checked against the rule, not the code.
	plain := func(n int) time.Duration {
		d := base
		for ; n > 1 && d < limit; n-- {
			d *= 2
		}
		return min(d, limit)
	}
	now := h.advanceBy(0)
	var waits []time.Duration
	for {
		in := h.rejects(batch)
		if in.Batch.State == "closed" {
			break
		}
		n := len(in.HeadAttempt.Rejected)
		if n != len(waits)+1 || in.Batch.EligibleAfter == nil {
			t.Fatalf("after %d tries: %d rejects recorded, eligible_after %v", len(waits)+1, n, in.Batch.EligibleAfter)
		}
		wait := in.Batch.EligibleAfter.Sub(now)
		if d := plain(n); wait > d || wait < d-time.Duration(float64(d)*jitter) {
			t.Fatalf("reject %d: back-off %v, want within [%v, %v]", n, wait, d-time.Duration(float64(d)*jitter), d)
		}
		waits = append(waits, wait)
		if len(waits) > 100 {
			t.Fatalf("over 100 tries of one batch in %v; the back-off does not bound them", window)
		}
		now = h.advanceBy(wait) // exactly when it may be tried again
	}
	// The fewest and the most tries the rule allows in the window: every
	// wait at its longest, or at its shortest.
	tries := func(share float64) int {
		n := 0
		for at := time.Duration(0); at < window; {
			n++
			d := plain(n)
			at += d - time.Duration(float64(d)*share)
		}
		return n
	}
	if lo, hi := tries(0), tries(jitter); len(waits) < lo || len(waits) > hi {
		t.Fatalf("%d tries in %v; the back-off allows %d to %d", len(waits), window, lo, hi)
	}
	events := h.status().LogHeadSeq - first
	t.Logf("%d tries and %d events in %v of test clock (the fixed one-minute back-off made 1,440 and 4,320); waits %v", len(waits), events, window, waits)

	// The close that gives the batch up is loud.
	in := h.rejects(batch)
	if in.Batch.CloseReason != "redelivery_window_exhausted" || !in.Batch.Notified {
		t.Fatalf("batch %s: closed %q, park hook recorded %t; want redelivery_window_exhausted, notified", batch, in.Batch.CloseReason, in.Batch.Notified)
	}
	checkLoud(t, h, hookOut, "redelivery_window_exhausted", batch, job, 1)
}

// checkLoud asserts the signs of an undelivered close: the park hook ran
// with the close's notice and reason, daemon status counts it, daemon.log
// warns, `batch list --state undelivered` lists it and `cbth wait` warns
// on stderr and fails.
func checkLoud(t *testing.T, h *homeDir, hookOut, reason, batch, job string, count int) {
	t.Helper()
	b, _ := os.ReadFile(hookOut)
	if want := "closed_undelivered " + reason + " " + batch + " T " + job; !strings.Contains(string(b), want) {
		t.Fatalf("park hook output %q; want a line %q", b, want)
	}
	var st struct {
		Undelivered int `json:"closed_undelivered_batches"`
	}
	h.ok(&st, "daemon", "status")
	if st.Undelivered != count {
		t.Fatalf("daemon status counts %d batches closed undelivered, want %d", st.Undelivered, count)
	}
	if r := h.run("daemon", "status"); !strings.Contains(r.stdout, "closed undelivered") {
		t.Fatalf("daemon status for people does not show the count:\n%s", r.stdout)
	}
	log, _ := os.ReadFile(filepath.Join(h.root, "log", "daemon.log"))
	var warned bool
	for _, l := range strings.Split(string(log), "\n") {
		warned = warned || (strings.Contains(l, "WARN") && strings.Contains(l, "closed undelivered") && strings.Contains(l, batch) && strings.Contains(l, reason))
	}
	if !warned {
		t.Fatalf("daemon.log has no warning line for batch %s closed %s:\n%s", batch, reason, log)
	}
	var list []batchView
	h.ok(&list, "batch", "list", "--state", "undelivered")
	if len(list) != count || list[len(list)-1].ID != batch {
		t.Fatalf("batch list --state undelivered: %+v; want %d ending with %s", list, count, batch)
	}
	for _, args := range [][]string{{"wait", "--job-id", job}, {"wait", "--job-id", job, "--json"}} {
		r := h.run(args...)
		if r.code == 0 || !strings.Contains(r.stderr, "warning: job "+job+" was never delivered") || !strings.Contains(r.stderr, reason) {
			t.Fatalf("cbth %v: exit %d, stderr %q; want a failure and a warning naming the job and %s", args, r.code, r.stderr, reason)
		}
	}
}

// The other two undelivered closes, a spent budget and a parked batch
// whose window ended, are as loud; a parked batch's hook runs once for
// the park and once more for the close.
func TestUndeliveredCloses_AreLoud(t *testing.T) {
	t.Parallel()
	t.Run("max_attempts_exhausted", func(t *testing.T) {
		hook, hookOut := undeliveredHook(t)
		h := deliveryHome(t, hook+"\nmax_wait_window = \"0s\"\nmax_delivery_attempts = 1")
		h.behave("T", "accept") // a wake-up: the cooldown ends the budget
		job := h.ready("T")
		h.advance("31s")
		checkLoud(t, h, hookOut, "max_attempts_exhausted", h.batches("T")[0].ID, job, 1)
	})
	t.Run("manual_resolution_expired", func(t *testing.T) {
		hook, hookOut := undeliveredHook(t)
		h := deliveryHome(t, hook+"\nmax_wait_window = \"0s\"\nredelivery_window = \"10m\"")
		h.behave("T", "unknown")
		job := h.ready("T")
		batch := h.batches("T")[0].ID
		h.advance("1s") // the next sweep runs the park's hook
		if b, _ := os.ReadFile(hookOut); !strings.HasPrefix(string(b), "parked acceptance unknown") {
			t.Fatalf("park hook output %q; want the park told first", b)
		}
		h.advance("11m")
		checkLoud(t, h, hookOut, "manual_resolution_expired", batch, job, 1)
	})
	t.Run("an operator's close is not announced", func(t *testing.T) {
		hook, hookOut := undeliveredHook(t)
		h := deliveryHome(t, hook+"\nmax_wait_window = \"0s\"")
		h.behave("T", "accept")
		job := h.ready("T")
		h.ok(nil, "batch", "close-head", "--source-thread-id", "T", "--reason", "operator_closed_unconfirmed")
		h.advance("1m")
		if b, _ := os.ReadFile(hookOut); len(b) != 0 {
			t.Fatalf("the park hook ran for an operator's close: %q", b)
		}
		if r := h.run("wait", "--job-id", job); r.code == 0 || strings.Contains(r.stderr, "warning") {
			t.Fatalf("wait on an operator-closed batch: exit %d, stderr %q; want a failure without the give-up warning", r.code, r.stderr)
		}
		var st struct {
			Undelivered int `json:"closed_undelivered_batches"`
		}
		h.ok(&st, "daemon", "status")
		if st.Undelivered != 0 {
			t.Fatalf("daemon status counts an operator's close as undelivered: %d", st.Undelivered)
		}
	})
}
