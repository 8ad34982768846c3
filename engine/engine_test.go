package engine_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/projections"
	bolt "go.etcd.io/bbolt"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "seed for randomized tests (0 picks one from the clock)")
	stepsFlag = flag.Int("steps", 100_000, "events the replay-equality test appends")
)

func seed(t *testing.T) uint64 {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed: %d (rerun with -seed=%d)", s, s)
	return s
}

// open opens the log of dir; enginetest.Open verifies it when the test
// ends.
func open(t testing.TB, dir string, opt engine.Options) *engine.Engine {
	t.Helper()
	return enginetest.Open(t, filepath.Join(dir, "cbth.db"), opt)
}

func image(t testing.TB, e *engine.Engine) engine.Image {
	t.Helper()
	var img engine.Image
	err := e.DB().View(func(tx *bolt.Tx) error {
		var err error
		img, err = projections.ReadImage(tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func mustVerify(t testing.TB, e *engine.Engine) engine.Report {
	t.Helper()
	rep, err := e.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify: %+v", rep.Problems)
	}
	return rep
}

// Replay equality: a long random run across every aggregate, then Rebuild
// must give byte-identical projection buckets.
func TestReplayEquality(t *testing.T) {
	s := seed(t)
	steps := *stepsFlag
	if testing.Short() {
		steps = 5000
	}
	e := open(t, t.TempDir(), engine.Options{NoSync: true, Clock: engine.NewManualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))})
	ctx := context.Background()
	if err := enginetest.Drive(ctx, e, enginetest.NewGenerator(s, ""), steps); err != nil {
		t.Fatal(err)
	}
	live := image(t, e)
	replayed, st, err := e.ReplayImage(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := engine.Diff(live, replayed, 5); len(d) > 0 {
		t.Fatalf("live projections differ from a replay: %v", d)
	}
	if st.Events != uint64(steps) {
		t.Fatalf("replayed %d events, want %d", st.Events, steps)
	}
	if _, err := e.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if d := engine.Diff(live, image(t, e), 5); len(d) > 0 {
		t.Fatalf("rebuilt projections differ: %v", d)
	}
	kinds := map[events.Kind]int{}
	for name, m := range live {
		if k, ok := projections.KindOfBucket(name); ok {
			kinds[k] = len(m)
		}
	}
	for _, k := range events.Kinds {
		if kinds[k] == 0 {
			t.Errorf("the run never created a %s aggregate", k)
		}
	}
	mustVerify(t, e)
}

func TestAppend_ExpectedVersionMismatch(t *testing.T) {
	e := open(t, t.TempDir(), engine.Options{})
	ctx := context.Background()
	sid := events.StreamID{Kind: events.KindJob, ID: "j1"}
	if _, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, sid, 0, &events.JobSubmitted{TargetKind: "cli", SourceThreadID: "t"}); err != nil {
		t.Fatal(err)
	}
	head := e.Head()
	_, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, sid, 0, &events.JobCompleted{})
	if errs.CodeOf(err) != errs.ECONFLICT {
		t.Fatalf("stale expected version: got %v, want ECONFLICT", err)
	}
	if e.Head() != head {
		t.Fatalf("head moved from %d to %d on a rejected append", head, e.Head())
	}
	if _, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, sid, 1, &events.JobCompleted{}); err != nil {
		t.Fatalf("correct expected version: %v", err)
	}
}

func TestAppend_IllegalTransitionAppendsNothing(t *testing.T) {
	e := open(t, t.TempDir(), engine.Options{})
	ctx := context.Background()
	sid := events.StreamID{Kind: events.KindJob, ID: "j1"}
	meta := engine.Meta{Actor: events.ActorCLI}
	if _, err := e.Append(ctx, meta, sid, engine.AnyVersion, &events.JobSubmitted{}, &events.JobCancelled{}); err != nil {
		t.Fatal(err)
	}
	before := image(t, e)
	head := e.Head()
	for _, p := range []events.Payload{&events.JobCompleted{}, &events.JobFailed{}, &events.JobSubmitted{}} {
		_, err := e.Append(ctx, meta, sid, engine.AnyVersion, p)
		if errs.CodeOf(err) != errs.ESTATE {
			t.Errorf("%s after cancel: got %v, want ESTATE", p.EventType(), err)
		}
	}
	// A multi-event append whose second event is illegal leaves no trace
	// of the first either.
	other := events.StreamID{Kind: events.KindJob, ID: "j2"}
	if _, err := e.Append(ctx, meta, other, engine.AnyVersion, &events.JobSubmitted{}, &events.JobCompleted{}, &events.JobFailed{}); errs.CodeOf(err) != errs.ESTATE {
		t.Fatalf("partly illegal append: got %v, want ESTATE", err)
	}
	if e.Head() != head {
		t.Fatalf("head moved from %d to %d", head, e.Head())
	}
	if d := engine.Diff(before, image(t, e), 5); len(d) > 0 {
		t.Fatalf("projections changed: %v", d)
	}
}

// A command retried with the same idempotency key returns the original
// result and appends nothing.
func TestExecute_IdempotentRetry(t *testing.T) {
	e := open(t, t.TempDir(), engine.Options{})
	ctx := context.Background()
	calls := 0
	cmd := engine.DeciderFunc(func(v engine.View, now time.Time) (engine.Decision, error) {
		calls++
		return engine.Decision{Emits: []engine.Emit{{Stream: events.StreamID{Kind: events.KindJob, ID: "j1"}, Payload: &events.JobSubmitted{TargetKind: "cli"}}}}, nil
	})
	meta := engine.Meta{Actor: events.ActorCLI, CommandID: "submit-1"}
	first, err := e.Execute(ctx, meta, cmd)
	if err != nil {
		t.Fatal(err)
	}
	head := e.Head()
	second, err := e.Execute(ctx, meta, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Replayed || calls != 1 {
		t.Fatalf("retry: replayed=%v calls=%d, want replayed and one decide", second.Replayed, calls)
	}
	if e.Head() != head {
		t.Fatalf("retry appended: head %d -> %d", head, e.Head())
	}
	if len(second.Events) != 1 || second.Events[0].ID != first.Events[0].ID {
		t.Fatalf("retry returned %+v, want the original event %s", second.Events, first.Events[0].ID)
	}
	// The key survives a restart and a rebuild.
	if _, err := e.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	third, err := e.Execute(ctx, meta, cmd)
	if err != nil || !third.Replayed || calls != 1 {
		t.Fatalf("after rebuild: replayed=%v err=%v calls=%d", third.Replayed, err, calls)
	}
}

// Flipping any one byte of a stored event is detected, and Verify names
// the seq.
func TestVerify_Tamper(t *testing.T) {
	s := seed(t)
	dir := t.TempDir()
	e := open(t, dir, engine.Options{NoSync: true})
	if err := enginetest.Drive(context.Background(), e, enginetest.NewGenerator(s, ""), 200); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, e)
	e.Close()

	for _, target := range []uint64{1, 77, 200} {
		for _, pos := range []int{0, 10, 40, -1, -40} {
			db, err := bolt.Open(filepath.Join(dir, "cbth.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			key := []byte{0, 0, 0, 0, 0, 0, byte(target >> 8), byte(target)}
			var orig []byte
			flip := func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte("log"))
				v := append([]byte(nil), b.Get(key)...)
				if orig == nil {
					orig = append([]byte(nil), v...)
				}
				i := pos
				if i < 0 {
					i += len(v)
				}
				v[i] ^= 0x01
				return b.Put(key, v)
			}
			if err := db.Update(flip); err != nil {
				t.Fatal(err)
			}
			db.Close()

			// The head record is the acknowledged one (cbth.db.ack): a
			// log whose head differs is refused at open, and verified
			// read-only, as `cbth events verify` does without a daemon.
			var rep engine.Report
			e2, err := engine.Open(filepath.Join(dir, "cbth.db"), engine.Options{Projections: projections.Store{}})
			switch {
			case target == 200 && errs.CodeOf(err) == errs.ECORRUPT:
				rep, err = engine.VerifyFile(context.Background(), projections.Store{}, filepath.Join(dir, "cbth.db"), time.Second)
			case target == 200 && pos == -1:
				// The last 32 bytes are the record's stored hash.
				t.Fatalf("the acknowledged head's hash flipped: open gave %v, want ECORRUPT", err)
			case err == nil:
				rep, err = e2.Verify(context.Background())
				e2.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			named := false
			for _, p := range rep.Problems {
				if p.Seq == target {
					named = true
				}
			}
			if !named {
				t.Errorf("flip at seq %d byte %d: problems %+v do not name seq %d", target, pos, rep.Problems, target)
			}

			db, err = bolt.Open(filepath.Join(dir, "cbth.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("log")).Put(key, orig) }); err != nil {
				t.Fatal(err)
			}
			db.Close()
		}
	}
}

func TestOpen_LockTimeout(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, engine.Options{})
	_, err := engine.Open(filepath.Join(dir, "cbth.db"), engine.Options{Projections: projections.Store{}, LockTimeout: 50 * time.Millisecond})
	if errs.CodeOf(err) != errs.EBUSY {
		t.Fatalf("second open: got %v, want EBUSY", err)
	}
}

func TestReadStreamAndSubscribe(t *testing.T) {
	e := open(t, t.TempDir(), engine.Options{})
	ctx := context.Background()
	sub := e.Subscribe()
	defer sub.Close()
	sid := events.StreamID{Kind: events.KindJob, ID: "j1"}
	meta := engine.Meta{Actor: events.ActorCLI}
	if _, err := e.Append(ctx, meta, sid, 0, &events.JobSubmitted{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, meta, events.StreamID{Kind: events.KindJob, ID: "j2"}, 0, &events.JobSubmitted{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, meta, sid, 1, &events.JobCompleted{ResultSummary: "ok"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.C():
	case <-time.After(5 * time.Second):
		t.Fatal("no commit signal")
	}
	var got []string
	if err := e.ReadStream(sid, func(env events.Envelope) error {
		got = append(got, env.Type)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "job.submitted,job.completed" {
		t.Fatalf("stream j1 = %v", got)
	}
	var seqs []uint64
	if err := e.ReadFrom(2, func(env events.Envelope) error { seqs = append(seqs, env.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 2 || seqs[0] != 2 || seqs[1] != 3 {
		t.Fatalf("ReadFrom(2) = %v", seqs)
	}
}

func TestClosedEngine(t *testing.T) {
	e := open(t, t.TempDir(), engine.Options{})
	e.Close()
	_, err := e.Append(context.Background(), engine.Meta{}, events.StreamID{Kind: events.KindJob, ID: "x"}, 0, &events.JobSubmitted{})
	if !errors.Is(err, errs.Sentinel(errs.EHOSTDOWN)) {
		t.Fatalf("append after close: %v", err)
	}
}

// The running-jobs counter follows every job in and out of running, has
// no key at zero, and equals what a rebuild derives.
func TestActiveJobCounter(t *testing.T) {
	e := open(t, t.TempDir(), engine.Options{NoSync: true})
	ctx := context.Background()
	count := func() uint64 {
		var n uint64
		if err := e.View(func(v engine.ProjectionTx) error { n = v.Count(aggregate.CountJobActive); return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	job := func(i int) events.StreamID {
		return events.StreamID{Kind: events.KindJob, ID: fmt.Sprintf("job-%d", i)}
	}
	for i := range 3 {
		if _, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, job(i), 0, enginetest.SubmitPayload(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(); n != 3 {
		t.Fatalf("after 3 submits: %d running", n)
	}
	steps := []struct {
		job  int
		p    events.Payload
		want uint64
	}{
		{0, &events.JobCompleted{ResultSummary: "ok"}, 2},
		{1, &events.JobCancelled{Reason: "no"}, 1},
		{2, &events.JobFailed{Reason: "boom"}, 0},
	}
	for _, s := range steps {
		if _, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, job(s.job), engine.AnyVersion, s.p); err != nil {
			t.Fatal(err)
		}
		if n := count(); n != s.want {
			t.Fatalf("after %s of job %d: %d running, want %d", s.p.EventType(), s.job, n, s.want)
		}
	}
	live := image(t, e)
	for k := range live["p.meta"] {
		if strings.HasPrefix(k, "count") {
			t.Fatalf("a counter at zero still has its key %q", k)
		}
	}
	if _, err := e.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if d := engine.Diff(live, image(t, e), 5); len(d) > 0 {
		t.Fatalf("live projections differ from a rebuild: %v", d)
	}
	mustVerify(t, e)
}

// Many concurrent writers, grouped into shared commits: every
// acknowledged event is in the log exactly once at the seq it was given,
// the log verifies, and the projections equal a rebuild.
func TestConcurrentAppendsAllLand(t *testing.T) {
	e := open(t, t.TempDir(), engine.Options{NoSync: true})
	ctx := context.Background()
	const writers, each = 16, 100
	seqs := make(chan uint64, writers*each*2)
	errc := make(chan error, writers)
	for w := range writers {
		go func() {
			for i := range each {
				sid := events.StreamID{Kind: events.KindJob, ID: fmt.Sprintf("w%02d-%04d", w, i)}
				res, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, sid, 0, enginetest.SubmitPayload(i))
				if err != nil {
					errc <- err
					return
				}
				seqs <- res.Events[0].Seq
				if i%2 == 1 { // a second event on a stream another commit created
					res, err = e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, sid, 1, &events.JobCancelled{Reason: "done"})
					if err != nil {
						errc <- err
						return
					}
					seqs <- res.Events[0].Seq
				}
			}
			errc <- nil
		}()
	}
	for range writers {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	close(seqs)
	seen := map[uint64]bool{}
	for s := range seqs {
		if seen[s] {
			t.Fatalf("seq %d acknowledged twice", s)
		}
		seen[s] = true
	}
	want := writers * (each + each/2)
	if len(seen) != want || e.Head() != uint64(want) {
		t.Fatalf("%d acknowledged seqs, head %d; want %d", len(seen), e.Head(), want)
	}
	mustVerify(t, e)
	live := image(t, e)
	if _, err := e.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if d := engine.Diff(live, image(t, e), 5); len(d) > 0 {
		t.Fatalf("live projections differ from a rebuild: %v", d)
	}
}

// Verify runs while writers keep committing (an operator verifying a
// live daemon) and reports no problem that is not there.
func TestVerifyDuringWrites(t *testing.T) {
	e := open(t, t.TempDir(), engine.Options{NoSync: true})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 4)
	for w := range 4 {
		go func() {
			for i := 0; ctx.Err() == nil && i < 5000; i++ {
				sid := events.StreamID{Kind: events.KindJob, ID: fmt.Sprintf("v%d-%05d", w, i)}
				if _, err := e.Append(context.Background(), engine.Meta{Actor: events.ActorCLI}, sid, 0, enginetest.SubmitPayload(i)); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 30 {
		rep, err := e.Verify(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			stop()
			t.Fatalf("verify during writes at head %d: %v", rep.Head, rep.Problems)
		}
	}
	stop()
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// Projections of another version (a file written before their derivation
// changed: version 1 had no version key) are not current, and a rebuild
// makes them current and equal to the log's.
func TestProjectionsOfAnotherVersionAreRebuilt(t *testing.T) {
	dir := t.TempDir()
	e := open(t, dir, engine.Options{NoSync: true})
	if err := enginetest.Drive(context.Background(), e, enginetest.NewGenerator(seed(t), ""), 300); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.ProjectionsCurrent(); err != nil || !ok {
		t.Fatalf("fresh projections current=%v err=%v", ok, err)
	}
	if err := e.DB().Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("p.meta")).Delete([]byte("version")) }); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.ProjectionsCurrent(); ok {
		t.Fatal("projections without a version key count as current")
	}
	if _, err := e.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.ProjectionsCurrent(); err != nil || !ok {
		t.Fatalf("after the rebuild current=%v err=%v", ok, err)
	}
}

// A rebuild interrupted between its transactions leaves projections that
// are not current, so the next start rebuilds them again.
func TestInterruptedRebuildIsNotCurrent(t *testing.T) {
	e := open(t, t.TempDir(), engine.Options{NoSync: true})
	ctx := context.Background()
	if err := enginetest.Drive(ctx, e, enginetest.NewGenerator(seed(t), ""), 500); err != nil {
		t.Fatal(err)
	}
	img, _, err := e.ReplayImage(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	img["p.index"][""] = nil // bbolt refuses an empty key: the write fails halfway
	if err := projections.WriteImageChunked(e.DB(), img, 50); err == nil {
		t.Fatal("a write with an empty key succeeded")
	}
	if ok, _ := e.ProjectionsCurrent(); ok {
		t.Fatal("half-written projections count as current")
	}
	if _, err := e.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.ProjectionsCurrent(); !ok {
		t.Fatal("not current after a rebuild")
	}
}
