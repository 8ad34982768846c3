package engine_test

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/projections"
	bolt "go.etcd.io/bbolt"
)

// seen is what a script has touched, so every Snapshot method can be
// asked about all of it.
type seen struct {
	streams  []events.StreamID
	indexes  map[string]map[string]bool // index -> keys
	dues     map[time.Time]bool
	counters map[string]bool
	commands []string
}

// learn adds what the state s derives.
func (sn *seen) learn(s aggregate.State) {
	if ix, ok := s.(aggregate.Indexer); ok {
		for _, en := range ix.Indexes() {
			if sn.indexes[en.Index] == nil {
				sn.indexes[en.Index] = map[string]bool{}
			}
			sn.indexes[en.Index][en.Key] = true
		}
	}
	if dl, ok := s.(aggregate.Deadliner); ok {
		for _, d := range dl.Deadlines() {
			if !d.At.IsZero() {
				sn.dues[d.At] = true
			}
		}
	}
	if c, ok := s.(aggregate.Counter); ok {
		for _, n := range c.Counts() {
			sn.counters[n] = true
		}
	}
}

// transcript asks every Snapshot method about everything seen and writes
// down the answers.
func transcript(t *testing.T, e *engine.Engine, sn *seen) string {
	t.Helper()
	var b strings.Builder
	err := e.View(func(v engine.ProjectionTx) error {
		fmt.Fprintf(&b, "checkpoint %d version %d\n", v.Checkpoint(), v.Version())
		for _, sid := range sn.streams {
			s, err := v.State(sid.Kind, sid.ID)
			if err != nil {
				return err
			}
			if s != nil {
				raw, err := aggregate.Encode(s)
				if err != nil {
					return err
				}
				fmt.Fprintf(&b, "state %s %s\n", sid, raw)
				sn.learn(s)
			}
			var seqs []uint64
			v.StreamSeqs(sid, 0, func(seq uint64) bool { seqs = append(seqs, seq); return true })
			fmt.Fprintf(&b, "seqs %s %v\n", sid, seqs)
			if len(seqs) > 1 {
				var part []uint64
				v.StreamSeqs(sid, seqs[len(seqs)/2], func(seq uint64) bool { part = append(part, seq); return len(part) < 2 })
				fmt.Fprintf(&b, "seqs until %s %v\n", sid, part)
			}
		}
		for _, k := range events.Kinds {
			var ids []string
			err := v.ForEach(k, func(s aggregate.State) error { ids = append(ids, s.Head().ID+fmt.Sprint(s.Head().Version)); return nil })
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "foreach %s %v\n", k, ids)
			if len(ids) > 2 {
				after, n := ids[len(ids)/3], 0
				after = after[:len(after)-1] // a prefix of an id: between ids
				err := v.ForEachAfter(k, after, func(s aggregate.State) error {
					fmt.Fprintf(&b, "after %s %s %s\n", k, after, s.Head().ID)
					if n++; n == 3 {
						return engine.ErrStop
					}
					return nil
				})
				if err != nil && err != engine.ErrStop {
					return err
				}
			}
		}
		for _, idx := range slices.Sorted(maps.Keys(sn.indexes)) {
			fmt.Fprintf(&b, "scan %s %v\n", idx, v.Scan(idx, ""))
			for key := range sn.indexes[idx] {
				fmt.Fprintf(&b, "lookup %s %q %v\n", idx, key, v.Lookup(idx, key))
				fmt.Fprintf(&b, "scan %s %q %v\n", idx, key[:len(key)/2], v.Scan(idx, key[:len(key)/2]))
			}
		}
		d, ok := v.NextDue()
		fmt.Fprintf(&b, "nextdue %v %v\n", d, ok)
		for at := range sn.dues {
			for _, t := range []time.Time{at.Add(-time.Nanosecond), at} {
				d, ok := v.NextDueAfter(t)
				fmt.Fprintf(&b, "nextdueafter %v %v %v\n", t, d, ok)
				fmt.Fprintf(&b, "dueby %v %v\n", t, v.DueBy(t))
			}
		}
		for n := range sn.counters {
			fmt.Fprintf(&b, "count %s %d\n", n, v.Count(n))
		}
		for _, id := range sn.commands {
			r, ok := v.Command(id)
			fmt.Fprintf(&b, "command %s %v %v\n", id, r, ok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Lines about maps come in random order: sort them.
	lines := strings.Split(b.String(), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestWriteBehindMatchesWriteThrough runs random scripts against an
// engine that stores its read models after every commit and one that
// writes them behind, flushing at random points: every Snapshot method
// answers the same after each step, and once flushed the stored read
// models are byte-identical.
var behindSeeds = flag.Int("behind.seeds", 3, "random scripts in TestWriteBehindMatchesWriteThrough")

func TestWriteBehindMatchesWriteThrough(t *testing.T) {
	for seed := uint64(1); seed <= uint64(*behindSeeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			dir := t.TempDir()
			t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			ca, cb := engine.NewManualClock(t0), engine.NewManualClock(t0)
			a := enginetest.Open(t, filepath.Join(dir, "through.db"), engine.Options{Clock: ca, FlushEachCommit: true})
			b := enginetest.Open(t, filepath.Join(dir, "behind.db"), engine.Options{Clock: cb})
			g := enginetest.NewGenerator(seed, "")
			rnd := rand.New(rand.NewPCG(seed, 7))
			sn := &seen{indexes: map[string]map[string]bool{}, counters: map[string]bool{}, dues: map[time.Time]bool{}}
			known := map[events.StreamID]bool{}
			ctx := context.Background()
			for i := range 250 {
				s := g.Next()
				meta := engine.Meta{Actor: events.ActorCLI}
				if rnd.IntN(4) == 0 {
					// Some keys repeat: the second use is replayed.
					meta.CommandID = fmt.Sprintf("cmd-%d", rnd.IntN(i+1))
					sn.commands = append(sn.commands, meta.CommandID)
				}
				ra, erra := a.Append(ctx, meta, s.Stream, s.Expected, s.Payload)
				rb, errb := b.Append(ctx, meta, s.Stream, s.Expected, s.Payload)
				if (erra == nil) != (errb == nil) || ra.Replayed != rb.Replayed {
					t.Fatalf("step %d: through %v %v, behind %v %v", i, ra.Replayed, erra, rb.Replayed, errb)
				}
				if erra == nil && !ra.Replayed {
					s.Commit()
					if !known[s.Stream] {
						known[s.Stream] = true
						sn.streams = append(sn.streams, s.Stream)
					}
				}
				d := time.Duration(rnd.IntN(3600)) * time.Second
				ca.Advance(d)
				cb.Advance(d)
				if rnd.IntN(10) == 0 {
					if err := b.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
				transcript(t, a, sn) // learns what the states derive now
				if ta, tb := transcript(t, a, sn), transcript(t, b, sn); ta != tb {
					t.Fatalf("step %d: the read models differ:\n%s", i, firstDiff(ta, tb))
				}
			}
			if err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if d := engine.Diff(image(t, a), image(t, b), 10); len(d) > 0 {
				t.Fatalf("stored read models differ after the flush: %v", d)
			}
		})
	}
}

func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return "through: " + la[i] + "\nbehind:  " + lb[i]
		}
	}
	return fmt.Sprintf("%d lines against %d", len(la), len(lb))
}

// TestOpenCatchesUpFromCheckpoint opens a copy of a live file taken while
// read-model changes were held in memory only, as a kill -9 leaves it:
// the stored read models are behind the log. Open folds the log after
// their checkpoint in and stores it, before anything else runs.
func TestOpenCatchesUpFromCheckpoint(t *testing.T) {
	dir := t.TempDir()
	e := open(t, dir, engine.Options{})
	ctx := context.Background()
	g := enginetest.NewGenerator(11, "")
	n := 0
	drive := func(k int) {
		for range k {
			s := g.Next()
			n++
			meta := engine.Meta{Actor: events.ActorCLI, CommandID: fmt.Sprintf("cmd-%d", n)}
			if _, err := e.Append(ctx, meta, s.Stream, s.Expected, s.Payload); err != nil {
				t.Fatal(err)
			}
			s.Commit()
		}
	}
	drive(200)
	if err := e.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "crashed.db")
	var head, checkpoint uint64
	for checkpoint == head {
		// The delta is flushed on its own after a while: append, and copy
		// what is committed right after, until the copy holds a delta's
		// worth of log past the checkpoint.
		drive(30)
		err := e.DB().View(func(tx *bolt.Tx) error {
			head, checkpoint = e.Head(), projections.Wrap(tx).Checkpoint()
			if checkpoint == head {
				return nil
			}
			return tx.CopyFile(copyPath, 0o600)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	c := enginetest.Open(t, copyPath, engine.Options{})
	var stored engine.Image
	err := c.DB().View(func(tx *bolt.Tx) error {
		var err error
		stored, err = projections.ReadImage(tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	replayed, st, err := c.ReplayImage(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Checkpoint <= checkpoint {
		t.Fatalf("the copy's log ends at %d, its read models at %d: nothing to catch up", st.Checkpoint, checkpoint)
	}
	if d := engine.Diff(stored, replayed, 10); len(d) > 0 {
		t.Fatalf("after Open the stored read models differ from a replay: %v", d)
	}
	if ok, err := c.ProjectionsCurrent(); err != nil || !ok {
		t.Fatalf("ProjectionsCurrent after the catch-up: %v %v", ok, err)
	}
}
