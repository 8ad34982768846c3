package main_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	bolt "go.etcd.io/bbolt"
)

// The soak (issue 18, item 10): seeded kill -9 rounds of the real daemon
// under concurrent load from CLI processes, the debug target delivering;
// after each round, every acknowledged job is in its acknowledged state,
// events verify is clean, no batch or job was delivered twice and every
// thread's deliveries kept FIFO order. `go test` runs a few rounds within
// about 20 s; `just soak` runs many more.

var (
	soakRounds = flag.Int("soak.rounds", 6, "kill -9 rounds in TestSoak_KillRounds")
	soakProcs  = flag.Int("soak.procs", 6, "concurrent CLI workers in TestSoak_KillRounds")
	soakJobs   = flag.Int("soak.jobs", 10, "jobs each worker submits and reports per round")
	soakFor    = flag.Duration("soak.duration", 20*time.Second, "no new round starts after this long")
	soakSeed   = flag.Uint64("soak.seed", 0, "seed of TestSoak_KillRounds (0: from the clock)")
)

const soakThreads = 4

// soakJob is what the workers were told about one job.
type soakJob struct {
	id, thread, key string
	state           string // the last acknowledged state
}

type soakFigures struct {
	rounds, acked, retried, lost, duplicated, verifyFailures int
	delivered, parkedClosed, stalledClosed, events           int
	batches                                                  int // batch.opened events
}

func TestSoak_KillRounds(t *testing.T) {
	t.Parallel()
	seed := *soakSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -args -soak.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := newHome(t, "CBTH_START_TIMEOUT=5s")
	os.MkdirAll(h.root, 0o700)
	config := "[delivery]\nmax_wait_window = \"20ms\"\nmin_send_interval = \"0s\"\ncooldown = \"1s\"\nsweep_interval = \"50ms\"\n"
	if err := os.WriteFile(filepath.Join(h.root, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	h.status() // the first daemon
	result := filepath.Join(t.TempDir(), "result.json")
	os.WriteFile(result, []byte(`{"soak":true}`), 0o600)

	var fig soakFigures
	jobs := map[string]*soakJob{} // by dedupe key
	readySeq := map[string]uint64{}
	var exported uint64
	start := time.Now()
	for round := 0; round < *soakRounds && time.Since(start) < *soakFor; round++ {
		acked, retried := h.soakRound(rng, round, result, jobs)
		fig.rounds++
		fig.acked += acked
		fig.retried += retried
		parked, stalled := h.settle(t)
		fig.parkedClosed += parked
		fig.stalledClosed += stalled

		// Every acknowledged job is there, in its acknowledged state,
		// once.
		var list []struct {
			JobID   string `json:"job_id"`
			Status  string `json:"status"`
			Summary string `json:"task_summary"`
		}
		h.ok(&list, "job", "list")
		byKey := map[string]int{}
		status := map[string]string{}
		for _, j := range list {
			byKey[j.Summary]++
			status[j.JobID] = j.Status
		}
		for key, j := range jobs {
			if n := byKey[key]; n > 1 {
				fig.duplicated++
				t.Errorf("round %d: job %s submitted %d times", round, key, n)
			}
			if got := status[j.id]; got != j.state {
				fig.lost++
				t.Errorf("round %d: job %s (%s) is %q, acknowledged %q", round, j.id, key, got, j.state)
			}
		}
		if r := h.run("events", "verify", "--json"); r.code != 0 {
			fig.verifyFailures++
			t.Errorf("round %d: events verify: exit %d\n%s", round, r.code, r.stdout)
		}
		exported = h.readySeqs(t, exported, readySeq, &fig.batches)
		fig.events = int(exported)
		h.checkBatches(t, round, status, fig.batches)
		delivered := h.checkDeliveries(t, round, readySeq)
		fig.delivered = delivered
	}
	t.Logf("soak: %d rounds, %d acknowledged operations (%d retried after a kill), %d lost, %d duplicated, %d verify failures, "+
		"%d jobs delivered, %d parked and %d stalled head batches closed by the operator, %d batches (every one listed), %d events", fig.rounds, fig.acked, fig.retried, fig.lost,
		fig.duplicated, fig.verifyFailures, fig.delivered, fig.parkedClosed, fig.stalledClosed, fig.batches, fig.events)
}

// soakRound runs the workers and kills the daemon once, at a seeded point
// of the round. A command cut off by the kill is retried with the same
// arguments, as a script would: the dedupe key makes a submit safe to
// repeat, and complete, fail and cancel answer already_<state> once their
// first try committed.
func (h *homeDir) soakRound(rng *rand.Rand, round int, result string, jobs map[string]*soakJob) (acked, retried int) {
	t := h.t
	procs, n := *soakProcs, *soakJobs
	killAt := int64(float64(procs*n*2) * (0.2 + 0.6*rng.Float64()))
	seeds := make([]uint64, procs)
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		count  atomic.Int64
		retrys atomic.Int64
		killed atomic.Bool
		// victim is the daemon the round killed: set once kill -9
		// reached a running daemon, so a round whose kill found none
		// tries again at the next command instead of counting it done.
		killMu sync.Mutex
		victim int
	)
	do := func(args ...string) (map[string]any, bool) {
		for try := 0; try < 30; try++ {
			r := h.run(append(args, "--json")...)
			if r.code == 0 {
				var out map[string]any
				json.Unmarshal([]byte(r.stdout), &out)
				if count.Add(1) >= killAt && !killed.Load() {
					killMu.Lock()
					if pid := h.pid(); !killed.Load() && pid > 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
						victim = pid
						killed.Store(true)
					}
					killMu.Unlock()
				}
				return out, true
			}
			if r.code != 69 { // only "the daemon went away" is retried
				t.Errorf("cbth %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
				return nil, false
			}
			retrys.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("cbth %v: still unreachable after 30 tries", args)
		return nil, false
	}
	for p := 0; p < procs; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seeds[p], uint64(p)))
			for i := 0; i < n; i++ {
				key := fmt.Sprintf("r%d-p%d-j%d", round, p, i)
				thread := fmt.Sprintf("soak-%d", r.IntN(soakThreads))
				out, ok := do("job", "submit", "--target", "debug", "--thread-id", thread, "--task-kind", "soak",
					"--summary", key, "--dedupe-key", key)
				if !ok {
					return
				}
				j := &soakJob{id: fmt.Sprint(out["job_id"]), thread: thread, key: key, state: "running"}
				mu.Lock()
				jobs[key] = j
				mu.Unlock()
				var next string
				switch x := r.IntN(10); {
				case x < 4:
					_, ok = do("job", "complete", "--job-id", j.id, "--summary", "done "+key)
					next = "ready"
				case x < 7:
					_, ok = do("job", "complete", "--job-id", j.id, "--summary", "done "+key, "--result-file", result)
					next = "ready"
				case x < 9:
					_, ok = do("job", "fail", "--job-id", j.id, "--reason", "failed "+key)
					next = "failed"
				default:
					_, ok = do("job", "cancel", "--job-id", j.id, "--reason", "cancelled "+key)
					next = "cancelled"
				}
				if !ok {
					return
				}
				mu.Lock()
				j.state = next
				mu.Unlock()
			}
		}(p)
	}
	wg.Wait()
	if !killed.Load() {
		t.Errorf("round %d ended before the kill", round)
	} else if pid := h.pid(); pid == victim {
		// The lock is released only when its holder is gone: a daemon
		// still holding it as the killed pid was not killed.
		t.Errorf("round %d: the daemon %d it killed still holds the lock", round, victim)
	}
	return int(count.Load()), int(retrys.Load())
}

// settle waits until every open batch is delivered or stopped for an
// operator, and closes those as an operator would; it returns how many it
// closed as parked, and as stalled. A delivery cut off by the kill may
// have reached the thread, so it is never replayed on its own: the
// restarted daemon parks it, or (a turn it was observing when killed) it
// stays in cooldown past its end with nothing to wake it. Both wait for
// an operator, and the soak is one.
func (h *homeDir) settle(t *testing.T) (parked, stalled int) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var open []map[string]any
		h.ok(&open, "batch", "list", "--state", "open")
		if len(open) == 0 {
			return parked, stalled
		}
		progress := false
		for _, b := range open {
			if b["head"] != true {
				continue
			}
			until, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(b["cooldown_until"]))
			isParked := strings.HasPrefix(fmt.Sprint(b["replay_policy"]), "manual")
			isStalled := b["state"] == "cooldown" && !until.IsZero() && time.Since(until) > 3*time.Second
			if !isParked && !isStalled {
				continue
			}
			id := fmt.Sprint(b["id"])
			if v, ok := b["batch_id"]; ok {
				id = fmt.Sprint(v)
			}
			h.ok(nil, "batch", "close-head", "--source-thread-id", fmt.Sprint(b["source_thread_id"]),
				"--reason", "operator_closed_unconfirmed", "--batch-id", id)
			if isParked {
				parked++
			} else {
				stalled++
			}
			progress = true
		}
		if !progress {
			time.Sleep(100 * time.Millisecond)
		}
	}
	var open []map[string]any
	h.ok(&open, "batch", "list", "--state", "open")
	b, _ := json.MarshalIndent(open, "", " ")
	t.Fatalf("batches still open 30 s after the round:\n%s", b)
	return parked, stalled
}

// readySeqs adds the seq of every job.completed event after from to seqs,
// counts the batch.opened ones in opened, and returns the head it read to.
func (h *homeDir) readySeqs(t *testing.T, from uint64, seqs map[string]uint64, opened *int) uint64 {
	r := h.run("events", "export", "--from", fmt.Sprint(from+1))
	if r.code != 0 {
		t.Fatalf("events export: exit %d %s", r.code, r.stderr)
	}
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	sc.Buffer(nil, 4<<20)
	last := from
	for sc.Scan() {
		var e struct {
			Seq    uint64 `json:"seq"`
			Type   string `json:"type"`
			Stream struct {
				ID string `json:"id"`
			} `json:"stream"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("export line: %v", err)
		}
		switch e.Type {
		case "job.completed":
			seqs[e.Stream.ID] = e.Seq
		case "batch.opened":
			*opened++
		}
		last = e.Seq
	}
	return last
}

// checkBatches lists every batch, open or closed, through the pages of
// `batch list`: each batch the log opened is listed once, none is open
// after settle, and every ready job is in exactly one batch.
func (h *homeDir) checkBatches(t *testing.T, round int, status map[string]string, opened int) {
	var all []struct {
		ID     string   `json:"batch_id"`
		State  string   `json:"state"`
		JobIDs []string `json:"job_ids"`
	}
	h.ok(&all, "batch", "list")
	if len(all) != opened {
		t.Errorf("round %d: batch list printed %d batches, the log opened %d", round, len(all), opened)
	}
	ids := map[string]bool{}
	in := map[string]int{}
	for _, b := range all {
		if ids[b.ID] {
			t.Errorf("round %d: batch %s listed twice", round, b.ID)
		}
		ids[b.ID] = true
		if b.State != "closed" {
			t.Errorf("round %d: batch %s is %s after settling", round, b.ID, b.State)
		}
		for _, j := range b.JobIDs {
			in[j]++
		}
	}
	for id, st := range status {
		if (st == "ready") != (in[id] == 1) || in[id] > 1 {
			t.Errorf("round %d: job %s (%s) is in %d batches", round, id, st, in[id])
		}
	}
}

// checkDeliveries reads every thread's debug delivery file: no batch and
// no job appears twice, and each thread's jobs arrive in the order they
// became ready. It returns how many jobs were delivered.
func (h *homeDir) checkDeliveries(t *testing.T, round int, readySeq map[string]uint64) int {
	total := 0
	for th := 0; th < soakThreads; th++ {
		thread := fmt.Sprintf("soak-%d", th)
		batches := map[string]int{}
		jobs := map[string]int{}
		var order []string
		for _, d := range h.deliveries(thread) {
			batches[d.BatchID]++
			for _, j := range d.JobIDs {
				jobs[j]++
				order = append(order, j)
			}
		}
		for b, n := range batches {
			if n > 1 {
				t.Errorf("round %d: batch %s delivered %d times to %s", round, b, n, thread)
			}
		}
		for j, n := range jobs {
			if n > 1 {
				t.Errorf("round %d: job %s delivered %d times to %s", round, j, n, thread)
			}
		}
		if !sort.SliceIsSorted(order, func(a, b int) bool { return readySeq[order[a]] < readySeq[order[b]] }) {
			t.Errorf("round %d: %s got its jobs out of FIFO order", round, thread)
		}
		total += len(order)
	}
	return total
}

// The storage-fault table: each fault to a stopped home's files gives the
// outcome spec/engine.md ("Damage") documents. The daemon either refuses
// to serve (ECORRUPT, exit 70, naming the file and the way out) or, for a
// record whose bytes changed, serves while events verify names the seq.
func TestSoak_StorageFaults(t *testing.T) {
	t.Parallel()
	base := newHome(t)
	if _, failures := submitLoad(base, 6, 40, nil); failures != 0 {
		t.Fatalf("%d submits failed", failures)
	}
	base.stop()
	victim := middleRecord(t, base.db())
	pristine, _ := os.ReadFile(base.db())
	ack, _ := os.ReadFile(base.db() + ".ack")
	pageSize, root := enginetest.LogBranchPage(t, base.db())
	first := firstLeafPage(t, base.db())

	// What the daemon does with each: refuses to start, serves until a
	// read reaches the damage (then that read is ECORRUPT and it stops),
	// or serves (the structure is sound; verify finds the record).
	const (
		refused  = "refused at start: ECORRUPT"
		onRead   = "served until read: ECORRUPT, the daemon stops"
		verified = "served: the record fails verify"
	)
	for _, f := range []struct {
		name    string
		fault   func(h *homeDir)
		outcome string
		words   string // in the refusal, or in a verify problem
	}{
		{"truncate to 0 bytes", func(h *homeDir) { os.Truncate(h.db(), 0) }, refused, "empty (0 bytes)"},
		{"truncate before the log's root page", func(h *homeDir) { os.Truncate(h.db(), int64(root*pageSize)) }, refused, "damaged"},
		{"delete the log", func(h *homeDir) { os.Remove(h.db()) }, refused, "is missing"},
		{"zero a page (the log's root)", func(h *homeDir) { patch(t, h.db(), int64(root*pageSize), make([]byte, pageSize)) }, refused, "damaged"},
		{"zero a page (the log's first leaf)", func(h *homeDir) { patch(t, h.db(), int64(first*pageSize), make([]byte, pageSize)) }, onRead, "damaged"},
		{"flip the newest meta page", func(h *homeDir) { enginetest.CorruptNewestMeta(t, h.db()) }, refused, "acknowledged"},
		{"flip a byte of a record", func(h *homeDir) {
			b, _ := os.ReadFile(h.db())
			i := bytes.Index(b, victim)
			if i < 0 {
				t.Fatal("the record is not in the file")
			}
			i += len(victim) / 2
			patch(t, h.db(), int64(i), []byte{b[i] ^ 0x01})
		}, verified, "hash"},
	} {
		t.Run(f.name, func(t *testing.T) {
			h := newHome(t)
			h.damaged = true
			os.MkdirAll(h.root, 0o700)
			os.WriteFile(h.db(), pristine, 0o600)
			os.WriteFile(h.db()+".ack", ack, 0o600)
			f.fault(h)
			switch f.outcome {
			case refused:
				h.fails(20*time.Second, "job", "list").want(t, "ECORRUPT", 70, f.words, "home reinit")
			case onRead:
				h.status()
				h.fails(20*time.Second, "events", "export").want(t, "ECORRUPT", 70, f.words)
				waitFor(t, "the daemon to stop serving", 10*time.Second, func() bool { return h.pid() == 0 })
			case verified:
				h.status()
				h.stop()
			}
			probs, exit := h.verifyReport()
			if exit != 70 || len(probs) == 0 || (f.outcome == verified && !strings.Contains(strings.Join(probs, "\n"), f.words)) {
				t.Fatalf("events verify: exit %d, problems %q; want one saying %q", exit, probs, f.words)
			}
			outcome := f.outcome
			t.Logf("%-36s %s; events verify: exit 70 with problems", f.name, outcome)
		})
	}
}

// middleRecord returns the stored bytes of the log's middle record.
func middleRecord(t *testing.T, path string) []byte {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var rec []byte
	db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("log"))
		k, _ := b.Cursor().Last()
		mid := binary.BigEndian.Uint64(k) / 2
		rec = bytes.Clone(b.Get(binary.BigEndian.AppendUint64(nil, mid)))
		return nil
	})
	if rec == nil {
		t.Fatal("no middle record")
	}
	return rec
}

// firstLeafPage returns the page of the log's first record, through
// bbolt's page API: the leftmost leaf under the log bucket's root.
func firstLeafPage(t *testing.T, path string) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	leaf := 0
	db.View(func(tx *bolt.Tx) error {
		root := int(tx.Bucket([]byte("log")).Root())
		for id := root; ; {
			p, err := tx.Page(id)
			if err != nil || p == nil {
				return err
			}
			if p.Type == "leaf" {
				leaf = id
				return nil
			}
			id = firstChild(t, path, db.Info().PageSize, id)
		}
	})
	if leaf == 0 {
		t.Fatal("no leaf under the log's root")
	}
	return leaf
}

// firstChild reads the pgid of a branch page's first element (a bbolt
// page: 16-byte header, then elements of pos u32, ksize u32, pgid u64).
func firstChild(t *testing.T, path string, pageSize, id int) int {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 8)
	f.ReadAt(b, int64(id*pageSize+16+8))
	return int(binary.LittleEndian.Uint64(b))
}

func patch(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
