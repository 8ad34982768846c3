package engine_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections"
	bolt "go.etcd.io/bbolt"
)

// An aggregate that cannot be folded inside an as-of Lookup or Scan is
// the read's error (ECORRUPT, naming the record), not a silent absence:
// Lookup and Scan answer no error, so ReadAsOf returns it although the
// caller's function saw only fewer entries.
func TestAsOf_UnfoldableAggregateIsTheReadsError(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cbth.db")
	// Not enginetest.Open: the log is damaged on purpose, and would fail
	// its verification at the end.
	e, err := engine.Open(path, engine.Options{Projections: projections.Store{}, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	first := map[events.StreamID]uint64{} // each stream's first seq
	for _, em := range story(0, time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)) {
		res, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, em.Stream, engine.AnyVersion, em.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := first[em.Stream]; !ok {
			first[em.Stream] = res.Events[0].Seq
		}
	}
	until := e.Head()
	const batch, thread = "story-batch-000", "story-thread-000"
	reads := []struct {
		name   string
		read   func(r *engine.AsOf) []index.Ref
		broken events.StreamID // the aggregate the read folds, damaged below
	}{{
		name:   "lookup",
		read:   func(r *engine.AsOf) []index.Ref { return r.Lookup(index.BatchAttempts, batch) },
		broken: events.StreamID{Kind: events.KindAttempt, ID: "story-att1-000"},
	}, {
		name:   "scan",
		read:   func(r *engine.AsOf) []index.Ref { return r.Scan(index.BatchThread, index.ThreadPrefix(thread)) },
		broken: events.StreamID{Kind: events.KindBatch, ID: batch},
	}}
	for _, c := range reads {
		err := e.ReadAsOf(until, func(r *engine.AsOf) error {
			if refs := c.read(r); len(refs) == 0 {
				return fmt.Errorf("the %s found nothing in the intact log", c.name)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s as of seq %d before the damage: %v", c.name, until, err)
		}
	}

	// The stored hash of each broken aggregate's first record flipped:
	// that record no longer decodes, so the aggregate cannot be folded.
	err = e.DB().Update(func(tx *bolt.Tx) error {
		log := tx.Bucket([]byte("log"))
		for _, c := range reads {
			key := binary.BigEndian.AppendUint64(nil, first[c.broken])
			v := append([]byte(nil), log.Get(key)...)
			v[len(v)-1] ^= 0x01
			if err := log.Put(key, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range reads {
		t.Run(c.name, func(t *testing.T) {
			err := e.ReadAsOf(until, func(r *engine.AsOf) error {
				c.read(r)
				return nil
			})
			if errs.CodeOf(err) != errs.ECORRUPT || !strings.Contains(err.Error(), fmt.Sprintf("seq %d", first[c.broken])) {
				t.Fatalf("%s as of seq %d over %s, whose seq %d is damaged: %v; want ECORRUPT naming the seq", c.name, until, c.broken, first[c.broken], err)
			}
		})
	}
}
