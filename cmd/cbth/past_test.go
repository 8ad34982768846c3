package main_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The operator's and auditor's time machine, through the real binary: a
// batch, a job and a thread's head as they were at a past seq or time,
// their stories, and the bad moments refused with nothing appended.

// inspectJSON runs a command and returns its JSON document as a map.
func (h *homeDir) inspectJSON(args ...string) map[string]any {
	h.t.Helper()
	var m map[string]any
	h.ok(&m, args...)
	return m
}

// jsonLines runs a command that prints JSON lines.
func (h *homeDir) jsonLines(args ...string) []map[string]any {
	h.t.Helper()
	r := h.run(append(args, "--json")...)
	if r.code != 0 {
		h.t.Fatalf("cbth %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			h.t.Fatalf("cbth %v: line %q is not JSON: %v", args, sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// withoutLive drops what a past inspection cannot replay: the target's
// live gate, and as_of_seq, which only the past has.
func withoutLive(m map[string]any) map[string]any {
	c := map[string]any{}
	for k, v := range m {
		if k != "delivery_gate" && k != "as_of_seq" {
			c[k] = v
		}
	}
	return c
}

func TestAsOf_ABatchAJobAndAHeadAsTheyWere(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "")
	h.behave("T", "accept") // accepted, then cooled down: the batch stays open
	job := h.ready("T")
	var jq struct {
		Batch struct {
			BatchID string `json:"batch_id"`
		} `json:"batch"`
	}
	h.ok(&jq, "job", "query", job)
	batch := jq.Batch.BatchID

	// Moment 1: the batch queued in its merge window.
	seq1 := h.status().LogHeadSeq
	at1 := testClock
	in1 := h.inspectJSON("batch", "inspect", "--batch-id", batch)
	job1 := h.inspectJSON("job", "query", job)
	head1 := h.inspectJSON("batch", "inspect-head", "--source-thread-id", "T")

	// Moment 2: delivered once and cooling down, a second job queued behind.
	h.advance("11s")
	job2 := h.ready("T")
	seq2 := h.status().LogHeadSeq
	in2 := h.inspectJSON("batch", "inspect", "--batch-id", batch)

	// Then the first batch is delivered and closes; the second becomes head.
	h.behave("T", "deliver")
	h.advance("31s")
	h.advance("11s")
	if cur := h.inspectJSON("batch", "inspect", "--batch-id", batch); cur["batch"].(map[string]any)["state"] != "closed" {
		t.Fatalf("the first batch did not close: %v", cur["batch"])
	}

	for _, c := range []struct {
		name string
		got  map[string]any
		want map[string]any
		seq  uint64
	}{
		{"batch at seq 1", h.inspectJSON("batch", "inspect", "--batch-id", batch, "--seq", strconv.FormatUint(seq1, 10)), in1, seq1},
		{"batch as of time 1", h.inspectJSON("batch", "inspect", "--batch-id", batch, "--as-of", at1), in1, seq1},
		{"batch at seq 2", h.inspectJSON("batch", "inspect", "--batch-id", batch, "--seq", strconv.FormatUint(seq2, 10)), in2, seq2},
		{"job at seq 1", h.inspectJSON("job", "query", job, "--seq", strconv.FormatUint(seq1, 10)), job1, seq1},
		{"head at seq 1", h.inspectJSON("batch", "inspect-head", "--source-thread-id", "T", "--seq", strconv.FormatUint(seq1, 10)), head1, seq1},
	} {
		if got := c.got["as_of_seq"]; got != float64(c.seq) {
			t.Errorf("%s: as_of_seq %v, want %d", c.name, got, c.seq)
		}
		if !reflect.DeepEqual(withoutLive(c.got), withoutLive(c.want)) {
			g, _ := json.MarshalIndent(withoutLive(c.got), "", " ")
			w, _ := json.MarshalIndent(withoutLive(c.want), "", " ")
			t.Errorf("%s differs from what the present said then:\n got %s\nwant %s", c.name, g, w)
		}
	}
	// The core's gate then: the merge window was open at moment 1.
	if g := h.inspectJSON("batch", "inspect", "--batch-id", batch, "--seq", strconv.FormatUint(seq1, 10))["delivery_gate"]; !strings.HasPrefix(g.(string), "merge window open") {
		t.Errorf("gate at seq 1 %q, want the merge window", g)
	}
	// The second job did not exist at moment 1.
	if r := h.run("job", "query", job2, "--seq", strconv.FormatUint(seq1, 10), "--json"); r.code != 1 || !strings.Contains(r.stdout, `"ENOENT"`) || !strings.Contains(r.stdout, "did not exist yet") {
		t.Errorf("a job before it existed: exit %d %s", r.code, r.stdout)
	}

	// Its story: every event of the batch, its attempts and jobs, in
	// order, with hashes and what changed.
	story := h.jsonLines("batch", "inspect", "--batch-id", batch, "--history")
	var last float64
	types := map[string]bool{}
	for _, e := range story {
		if e["seq"].(float64) <= last {
			t.Fatalf("story out of order: %v", story)
		}
		last = e["seq"].(float64)
		types[e["type"].(string)] = true
		if len(e["hash"].(string)) != 64 || e["actor"] == "" || e["recorded_at"] == nil {
			t.Fatalf("entry without hash, actor or time: %v", e)
		}
		if e["type"] == "batch.closed" {
			found := false
			for _, c := range e["changes"].([]any) {
				c := c.(map[string]any)
				if c["field"] == "state" && c["before"] == "cooldown" && c["after"] == "closed" {
					found = true
				}
			}
			if !found {
				t.Errorf("batch.closed does not show state cooldown -> closed: %v", e["changes"])
			}
		}
	}
	for _, want := range []string{"job.submitted", "job.completed", "batch.opened", "attempt.prepared", "attempt.accepted", "batch.closed"} {
		if !types[want] {
			t.Errorf("story lacks %s: %v", want, types)
		}
	}
	// Up to a moment, the story stops there.
	upTo := h.jsonLines("batch", "inspect", "--batch-id", batch, "--history", "--seq", strconv.FormatUint(seq1, 10))
	if len(upTo) == 0 || len(upTo) >= len(story) || upTo[len(upTo)-1]["seq"].(float64) > float64(seq1) {
		t.Errorf("story up to seq %d: %d entries of %d", seq1, len(upTo), len(story))
	}
	human := h.run("job", "query", job, "--history")
	if human.code != 0 || !strings.Contains(human.stdout, "job.submitted") || !strings.Contains(human.stdout, "status") {
		t.Errorf("human story: exit %d\n%s%s", human.code, human.stdout, human.stderr)
	}

	// The thread's batches over time, in FIFO order, with how each closed.
	th := h.jsonLines("thread", "history", "--source-thread-id", "T")
	if len(th) != 2 || th[0]["batch_id"] != batch || th[0]["close_reason"] != "delivered" || th[1]["opened_seq"].(float64) <= th[0]["opened_seq"].(float64) {
		t.Errorf("thread history %v", th)
	}
	if r := h.run("thread", "history", "--source-thread-id", "T"); r.code != 0 || !strings.Contains(r.stdout, batch) || !strings.Contains(r.stdout, "delivered") {
		t.Errorf("human thread history: %s%s", r.stdout, r.stderr)
	}
}

// A bad moment through the binary: the CLI refuses a time it cannot
// read, and the daemon's refusals (each one tested in
// adapters/daemon/inspectmod, TestBadMomentsAndNamesAreRefused) reach
// the user as exit 2 with their code; nothing is appended.
func TestAsOf_BadMomentsAreRefusedAndAppendNothing(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "")
	h.behave("T", "accept")
	job := h.ready("T")
	var jq struct {
		Batch struct {
			BatchID string `json:"batch_id"`
		} `json:"batch"`
	}
	h.ok(&jq, "job", "query", job)
	head := h.status().LogHeadSeq
	for _, c := range []struct {
		args        []string
		code        int
		ecode, says string
	}{
		{[]string{"batch", "inspect", "--batch-id", jq.Batch.BatchID, "--as-of", "yesterday"}, 2, "EINVAL", "not an RFC 3339 time"},
		{[]string{"job", "query", job, "--seq", strconv.FormatUint(head+100, 10)}, 2, "EINVAL", "past the head"},
		{[]string{"batch", "inspect", "--batch-id", job, "--history"}, 2, "EINVAL", "is a job, not a batch"},
	} {
		r := h.run(append(c.args, "--json")...)
		if r.code != c.code || !strings.Contains(r.stdout, `"`+c.ecode+`"`) || !strings.Contains(r.stdout+r.stderr, c.says) {
			t.Errorf("%v: exit %d\n%s%s\nwant exit %d, %s, %q", c.args, r.code, r.stdout, r.stderr, c.code, c.ecode, c.says)
		}
	}
	if got := h.status().LogHeadSeq; got != head {
		t.Errorf("the refusals appended: head %d, was %d", got, head)
	}
}

func TestSupersede_CarriesTheJobsAndKeepsFIFO(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "max_wait_window = \"0s\"")
	h.behave("T", "accept") // each head stays open, cooling down
	a := h.ready("T")
	b := h.ready("T")
	bs := h.batches("T")
	if len(bs) != 2 || bs[0].JobIDs[0] != a || bs[1].JobIDs[0] != b {
		t.Fatalf("batches %+v", bs)
	}
	first, second := bs[0].ID, bs[1].ID

	// Refusals change nothing: not the head, a job's id, no reason.
	head := h.status().LogHeadSeq
	for _, c := range []struct {
		args  []string
		ecode string
	}{
		{[]string{"batch", "supersede", "--batch-id", second, "--reason", "x"}, "ESTATE"},
		{[]string{"batch", "supersede", "--batch-id", a, "--reason", "x"}, "EINVAL"},
		{[]string{"batch", "supersede", "--batch-id", "no-such-batch", "--reason", "x"}, "ENOENT"},
	} {
		if r := h.run(append(c.args, "--json")...); r.code == 0 || !strings.Contains(r.stdout, `"`+c.ecode+`"`) {
			t.Errorf("%v: exit %d %s", c.args, r.code, r.stdout)
		}
	}
	if got := h.status().LogHeadSeq; got != head {
		t.Fatalf("refusals appended: head %d, was %d", got, head)
	}

	var rep struct {
		Outcome      string `json:"outcome"`
		SupersededBy string `json:"superseded_by"`
		Batch        struct {
			State        string `json:"state"`
			CloseReason  string `json:"close_reason"`
			CloseDetail  string `json:"close_detail"`
			SupersededBy string `json:"superseded_by"`
		} `json:"batch"`
	}
	h.ok(&rep, "batch", "supersede", "--batch-id", first, "--reason", "a newer CI run replaced it")
	if rep.Outcome != "superseded" || rep.SupersededBy != second || rep.Batch.State != "closed" || rep.Batch.CloseReason != "superseded" ||
		rep.Batch.CloseDetail != "a newer CI run replaced it" || rep.Batch.SupersededBy != second {
		t.Fatalf("supersede: %+v", rep)
	}
	h.ok(&rep, "batch", "supersede", "--batch-id", first, "--reason", "again")
	if rep.Outcome != "already_superseded" || rep.SupersededBy != second {
		t.Fatalf("repeat: %+v", rep)
	}
	// The jobs went into the next batch, which is the head now; the
	// superseded one's job follows it there and takes its place by ready
	// time: before the next batch's own, in its summary too, and the
	// batch is first ready when that job was.
	bs = h.batches("T")
	if !bs[1].Head || len(bs[1].JobIDs) != 2 || bs[1].JobIDs[0] != a || bs[1].JobIDs[1] != b {
		t.Fatalf("after supersede: %+v", bs)
	}
	var next, old struct {
		Batch struct {
			Summary      string `json:"summary"`
			FirstReadyAt string `json:"first_ready_at"`
		} `json:"batch"`
	}
	h.ok(&next, "batch", "inspect", "--batch-id", second)
	h.ok(&old, "batch", "inspect", "--batch-id", first)
	if want := "ci: done " + a[len(a)-4:] + "\nci: done " + b[len(b)-4:]; next.Batch.Summary != want || next.Batch.FirstReadyAt != old.Batch.FirstReadyAt {
		t.Fatalf("the carried job's place: summary %q (want %q), first ready %s (the superseded batch's %s)",
			next.Batch.Summary, want, next.Batch.FirstReadyAt, old.Batch.FirstReadyAt)
	}
	var jq struct {
		Batch struct {
			BatchID string `json:"batch_id"`
		} `json:"batch"`
	}
	h.ok(&jq, "job", "query", a)
	if jq.Batch.BatchID != second {
		t.Fatalf("job %s still points at batch %s", a, jq.Batch.BatchID)
	}
	// A later job queues behind; the FIFO delivers the new head (with
	// both jobs) before it.
	c := h.ready("T")
	h.behave("T", "deliver")
	h.advance("31s")
	h.advance("31s")
	var got [][]string
	for _, d := range h.deliveries("T") {
		got = append(got, d.JobIDs)
	}
	want := [][]string{{a}, {a, b}, {c}}
	if len(got) < 3 || !reflect.DeepEqual(got[len(got)-2:], want[1:]) || !reflect.DeepEqual(got[0], want[0]) {
		t.Fatalf("deliveries %v, want %v (with redeliveries of the first in between allowed only before the supersede)", got, want)
	}
	var w struct {
		OK bool `json:"ok"`
	}
	h.ok(&w, "wait", "--job-id", a, "--job-id", b, "--job-id", c)
	if !w.OK {
		t.Fatalf("wait: %+v", w)
	}
	th := h.jsonLines("thread", "history", "--source-thread-id", "T")
	if len(th) != 3 || th[0]["batch_id"] != first || th[0]["close_reason"] != "superseded" || th[1]["close_reason"] != "delivered" || th[2]["close_reason"] != "delivered" {
		t.Fatalf("thread history %v", th)
	}
	// Its story shows the supersede.
	story := h.jsonLines("batch", "inspect", "--batch-id", first, "--history")
	if story[len(story)-1]["type"] == nil {
		t.Fatal("no story")
	}
	found := false
	for _, e := range story {
		found = found || e["type"] == "batch.superseded"
	}
	if !found {
		t.Errorf("the story lacks batch.superseded")
	}
}

// The seed's names: a batch's policy flags at its top level, a job's
// metadata_ref, an artifact's retention_until, an attempt's snapshot_path
// (Desktop: the ready entry's locator) and delivery_deadline.
func TestSeedNames_PolicyFlagsRefsAndAttemptFields(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.readyDesktop("S")
	ready := h.claim().Ready
	if ready == nil {
		t.Fatal("nothing ready")
	}
	var in struct {
		Batch    map[string]any   `json:"batch"`
		Attempts []map[string]any `json:"attempts"`
	}
	h.ok(&in, "batch", "inspect-head", "--source-thread-id", "S")
	if len(in.Attempts) != 1 || in.Attempts[0]["snapshot_path"] != ready.SnapshotPath || ready.SnapshotPath == "" {
		t.Errorf("a Desktop attempt's snapshot_path %v, the ready entry's %q", in.Attempts[0]["snapshot_path"], ready.SnapshotPath)
	}
	if in.Attempts[0]["delivery_deadline"] != in.Batch["redelivery_window_ends_at"] {
		t.Errorf("delivery_deadline %v, the batch's window ends %v", in.Attempts[0]["delivery_deadline"], in.Batch["redelivery_window_ends_at"])
	}
	var jp struct {
		Policy map[string]any `json:"delivery_policy"`
	}
	h.ok(&jp, "job", "query", in.Batch["job_ids"].([]any)[0].(string))
	for _, k := range []string{"read_only", "requires_approval", "requires_network", "requires_write_access"} {
		if in.Batch["delivery_"+k] != jp.Policy[k] {
			t.Errorf("batch delivery_%s = %v, its job's policy says %v", k, in.Batch["delivery_"+k], jp.Policy[k])
		}
	}
	if _, ok := in.Batch["delivery_policy"]; ok {
		t.Errorf("the batch still prints delivery_policy: %v", in.Batch)
	}

	d := deliveryHome(t, "max_wait_window = \"0s\"")
	meta := filepath.Join(t.TempDir(), "meta.json")
	os.WriteFile(meta, []byte(`{"pr": 42, "delivery_policy": {"read_only": true}}`), 0o600)
	var sub struct {
		JobID string `json:"job_id"`
	}
	d.behave("T", "accept")
	d.ok(&sub, "job", "submit", "--target", "debug", "--thread-id", "T", "--task-kind", "ci", "--summary", "s", "--metadata-file", meta)
	result := filepath.Join(t.TempDir(), "r.json")
	os.WriteFile(result, []byte(`{}`), 0o600)
	d.ok(nil, "job", "complete", "--job-id", sub.JobID, "--summary", "ok", "--result-file", result)
	var job struct {
		MetadataRef string `json:"metadata_ref"`
		Artifact    struct {
			RetentionUntil *string `json:"retention_until"`
			GCEligibleAt   string  `json:"gc_eligible_at"`
		} `json:"artifact"`
		Batch struct {
			BatchID string `json:"batch_id"`
		} `json:"batch"`
	}
	d.ok(&job, "job", "query", sub.JobID)
	ref, ok := strings.CutPrefix(job.MetadataRef, "log:")
	ex := d.jsonLines("events", "export", "--from", ref)
	if !ok || len(ex) == 0 || ex[0]["type"] != "job.submitted" || ex[0]["payload"].(map[string]any)["metadata"] == nil {
		t.Errorf("metadata_ref %q does not name the submit that carried it", job.MetadataRef)
	}
	if job.Artifact.RetentionUntil != nil {
		t.Errorf("retention_until %v while an open batch holds the artifact", *job.Artifact.RetentionUntil)
	}
	var bi struct {
		Batch    map[string]any   `json:"batch"`
		Attempts []map[string]any `json:"attempts"`
	}
	d.ok(&bi, "batch", "inspect", "--batch-id", job.Batch.BatchID)
	if bi.Batch["delivery_read_only"] != true || bi.Attempts[0]["snapshot_path"] != "" || bi.Attempts[0]["delivery_deadline"] == nil {
		t.Errorf("a debug batch and attempt: %v %v", bi.Batch, bi.Attempts)
	}
	d.ok(nil, "batch", "close-head", "--source-thread-id", "T", "--reason", "operator_confirmed_delivery")
	d.ok(&job, "job", "query", sub.JobID)
	if job.Artifact.RetentionUntil == nil || *job.Artifact.RetentionUntil != job.Artifact.GCEligibleAt {
		t.Errorf("retention_until %v after the close, gc_eligible_at %s", job.Artifact.RetentionUntil, job.Artifact.GCEligibleAt)
	}
}

// events diff: the first divergence field by field, and how every
// aggregate compares; exit 0 same, 1 different.
func TestEventsDiff_FieldsAndAggregates(t *testing.T) {
	t.Parallel()
	a := deliveryHome(t, "max_wait_window = \"0s\"")
	b := deliveryHome(t, "max_wait_window = \"0s\"")
	for _, h := range []*homeDir{a, b} {
		h.ready("T")
	}
	same := a.status().LogHeadSeq
	a.submitTo("debug", "X")
	b.submitTo("debug", "Y")
	b.submitTo("debug", "Z")
	a.ok(nil, "daemon", "stop")
	b.ok(nil, "daemon", "stop")
	if r := a.run("events", "diff", a.root, a.root, "--json"); r.code != 0 || !strings.Contains(r.stdout, `"identical": true`) {
		t.Fatalf("a log against itself: exit %d %s", r.code, r.stdout)
	}
	r := a.run("events", "diff", a.root, b.root, "--json")
	var res struct {
		Identical bool   `json:"identical"`
		First     uint64 `json:"first_divergent_seq"`
		Fields    []struct {
			Field string `json:"field"`
			A, B  any
		} `json:"fields"`
		Aggregates struct {
			Same    int `json:"same"`
			Changed int `json:"changed"`
			OnlyA   int `json:"only_in_a"`
			OnlyB   int `json:"only_in_b"`
		} `json:"aggregates"`
		Streams []struct {
			Stream, Status string
		} `json:"streams"`
	}
	if r.code != 1 || json.Unmarshal([]byte(r.stdout), &res) != nil || res.Identical || res.First != same+1 {
		t.Fatalf("diff: exit %d %s", r.code, r.stdout)
	}
	fields := map[string][2]any{}
	for _, f := range res.Fields {
		fields[f.Field] = [2]any{f.A, f.B}
	}
	if got := fields["payload.source_thread_id"]; got != [2]any{"X", "Y"} {
		t.Errorf("payload.source_thread_id at the divergence: %v (fields %v)", got, fields)
	}
	if _, ok := fields["hash"]; !ok {
		t.Errorf("the hashes differ but are not listed: %v", fields)
	}
	if _, ok := fields["type"]; ok {
		t.Errorf("the types are the same but listed: %v", fields)
	}
	// The X/Y job has one id in both logs (ids derive from the chain) and
	// other events: changed; the Z job only in B; the rest the same.
	if res.Aggregates.Same == 0 || res.Aggregates.Changed != 1 || res.Aggregates.OnlyB != 1 || res.Aggregates.OnlyA != 0 || len(res.Streams) != 2 {
		t.Errorf("aggregates %+v streams %+v", res.Aggregates, res.Streams)
	}
	human := a.run("events", "diff", a.root, b.root)
	if human.code != 1 || !strings.Contains(human.stdout, "payload.source_thread_id") || !strings.Contains(human.stdout, "1 changed, 0 only in A, 1 only in B") {
		t.Errorf("human diff: %s", human.stdout)
	}
}
