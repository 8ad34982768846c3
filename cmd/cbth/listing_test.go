package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections"
)

// Listings page, never fail (issue 18 item 9), through the real binary:
// a home with thousands of batches and jobs, far more than one socket
// frame holds, lists every one of them, whole or by --limit and --after.

// bulkHome writes a log with the engine itself (the fast path: no
// process or fsync per job), before any daemon runs: `batches` threads
// each with one job completed into an open batch of target cli (no cli
// target runs in the daemon, so they stay queued), and on thread W
// `failed` jobs with 4 KiB of metadata that failed, so waiting on W ends
// at once.
func bulkHome(t *testing.T, batches, failed int) *homeDir {
	h := newHome(t)
	if err := os.MkdirAll(h.root, 0o700); err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(filepath.Join(h.root, "cbth.db"), engine.Options{Projections: projections.Store{}, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := command.DeliveryConfig{MaxJobsPerBatch: 8, MaxTotalBytes: 256 << 10, MaxWaitWindow: 2 * time.Second,
		RedeliveryWindow: 24 * time.Hour, MaxDeliveryAttempts: 5, InlinePayloadLimit: 16 << 10}
	ctx := context.Background()
	meta := engine.Meta{Actor: events.ActorCLI}
	// A summary of a few hundred bytes, as a CI job's might be, so the
	// listing is megabytes.
	long := strings.Repeat("all 412 checks passed; ", 20)
	// and metadata of a few KiB, as a job carrying its CI environment's
	// might have.
	env := json.RawMessage(`{"env":"` + strings.Repeat("CI=1 ", 800) + `"}`)
	inParallel(t, batches+failed, func(i int) error {
		thread := fmt.Sprintf("t%05d", i)
		if i >= batches {
			thread = "W"
		}
		sub := command.SubmitJob{Target: "cli", ThreadID: thread, TaskKind: "ci",
			Summary: fmt.Sprintf("wait for CI on pull request %d", i), Policy: events.FailClosedPolicy}
		if i >= batches {
			sub.Metadata = env // 500 of these are more than a frame
		}
		id, _, err := engine.Exec[string](ctx, e, meta, sub)
		if err == nil && i < batches {
			_, err = e.Execute(ctx, meta, command.CompleteJob{Config: cfg, JobID: id, Summary: long})
		} else if err == nil {
			_, err = e.Execute(ctx, meta, command.FailJob{JobID: id, Reason: "runner lost"})
		}
		return err
	})
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestListings_ThousandsOfBatchesPage(t *testing.T) {
	t.Parallel()
	const batches, failed = 3000, 2000
	t0 := time.Now()
	h := bulkHome(t, batches, failed)
	t.Logf("wrote %d batches and %d more jobs in %v", batches, failed, time.Since(t0).Round(time.Millisecond))

	// Whole: more than a frame's worth, in the order they opened.
	var all []batchView
	r := h.run("batch", "list", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || r.code != 0 {
		t.Fatalf("batch list: exit %d, %v\n%s", r.code, err, r.stderr)
	}
	if len(r.stdout) < 4<<20 {
		t.Fatalf("the listing is %d bytes; the test wants one several frames long", len(r.stdout))
	}
	size := len(r.stdout)
	if len(all) != batches {
		t.Fatalf("batch list printed %d batches, want %d", len(all), batches)
	}
	seen := map[string]bool{}
	for _, b := range all {
		if seen[b.ID] || b.State != "queued" {
			t.Fatalf("batch %s listed twice or not queued (%s)", b.ID, b.State)
		}
		seen[b.ID] = true
	}
	var open []batchView
	h.ok(&open, "batch", "list", "--state", "open")
	if len(open) != batches || open[batches-1].ID != all[batches-1].ID {
		t.Fatalf("batch list --state open: %d batches, want %d", len(open), batches)
	}

	// By --limit and --after: a script walks the same list in pieces,
	// each starting after the last id the one before printed.
	var walked []batchView
	for after, pieces := "", 0; ; pieces++ {
		args := []string{"batch", "list", "--limit", "1100"}
		if after != "" {
			args = append(args, "--after", after)
		}
		var piece []batchView
		h.ok(&piece, args...)
		if len(piece) > 1100 || pieces > 3 {
			t.Fatalf("--limit 1100 printed %d batches (piece %d)", len(piece), pieces)
		}
		walked = append(walked, piece...)
		if len(piece) < 1100 {
			break
		}
		after = piece[len(piece)-1].ID
	}
	if len(walked) != batches {
		t.Fatalf("walking by --limit 1100 listed %d batches, want %d", len(walked), batches)
	}
	for i := range walked {
		if walked[i].ID != all[i].ID {
			t.Fatalf("walked batch %d is %s, the whole list has %s", i, walked[i].ID, all[i].ID)
		}
	}
	h.fails(10*time.Second, "batch", "list", "--after", "no-such-batch").want(t, "ENOENT", 1, "no-such-batch")

	// Jobs likewise: every one, whole or by pieces.
	var jobs []struct {
		JobID string `json:"job_id"`
	}
	h.ok(&jobs, "job", "list")
	if len(jobs) != batches+failed {
		t.Fatalf("job list printed %d jobs, want %d", len(jobs), batches+failed)
	}
	var first, rest []struct {
		JobID string `json:"job_id"`
	}
	h.ok(&first, "job", "list", "--limit", "7")
	h.ok(&rest, "job", "list", "--after", first[6].JobID)
	if len(first) != 7 || len(rest) != batches+failed-7 || rest[0].JobID != jobs[7].JobID {
		t.Fatalf("job list --limit 7 then --after: %d and %d jobs", len(first), len(rest))
	}

	// Waiting on a thread of thousands of jobs reports every one.
	r = h.run("wait", "--thread-id", "W", "--json")
	var w struct {
		Done bool `json:"done"`
		OK   bool `json:"ok"`
		Jobs []struct {
			Status string `json:"status"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &w); err != nil || r.code != 1 || !w.Done || w.OK || len(w.Jobs) != failed {
		t.Fatalf("wait on W: exit %d, done %t ok %t, %d jobs (%v); want exit 1, done, not ok, %d jobs", r.code, w.Done, w.OK, len(w.Jobs), err, failed)
	}

	// The log, too, is read page by page.
	r = h.run("events", "export")
	if n := strings.Count(r.stdout, "\n"); r.code != 0 || uint64(n) != h.status().LogHeadSeq {
		t.Fatalf("events export: exit %d, %d events", r.code, n)
	}
	t.Logf("listed %d batches (%d bytes of JSON) and %d jobs; whole test %v", batches, size, batches+failed, time.Since(t0).Round(time.Millisecond))
}

// A CortexFS tree is read whole (ctx.tree.load, `cbth model list`), so a
// save that would make it too big for one reply is refused, and the
// biggest tree that may be saved is read back in one.
func TestListings_ATreeIsNeverTooBigToReadBack(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.status()
	root := filepath.Join(t.TempDir(), "ctx")
	runner, _ := filepath.Abs(cbthBin)
	set := func(pad int) tree.Set {
		return tree.Set{Runner: runner, Aliases: []tree.Alias{}, Objects: []object.Object{{Kind: object.KindTool, Path: "big",
			Session: object.SessionNone, Meta: object.Meta{ID: "big", Name: "big", Type: "tool", Description: strings.Repeat("d", pad)}}}}
	}
	encoded := func(s tree.Set) int {
		b, err := ipc.Marshal(api.TreeDoc{Exists: true, Set: s})
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	// Pad the one object to just over, then just under, what a tree may
	// hold (a reply less 1 KiB of room).
	over := ipc.MaxResult - 1024 + 100
	pad := over - encoded(set(0))
	err := callOpArgs(h.root, "ctx.tree.save", api.TreeArgs{Root: root, Set: set(pad)}, nil)
	if errs.CodeOf(err) != errs.EMSGSIZE || !strings.Contains(err.Error(), "a tree may hold") {
		t.Fatalf("saving a tree of %d bytes: %v; want EMSGSIZE", over, err)
	}
	var doc api.TreeDoc
	if err := callOpArgs(h.root, "ctx.tree.load", api.TreeArgs{Root: root}, &doc); err != nil || doc.Exists {
		t.Fatalf("after the refused save: exists %t, %v", doc.Exists, err)
	}
	if err := callOpArgs(h.root, "ctx.tree.save", api.TreeArgs{Root: root, Set: set(pad - 200)}, nil); err != nil {
		t.Fatalf("saving a tree just under the bound: %v", err)
	}
	if err := callOpArgs(h.root, "ctx.tree.load", api.TreeArgs{Root: root}, &doc); err != nil || len(doc.Set.Objects) != 1 ||
		len(doc.Set.Objects[0].Meta.Description) != pad-200 {
		t.Fatalf("loading the biggest tree: %v", err)
	}
}
