package engine

import (
	"encoding/binary"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	bolt "go.etcd.io/bbolt"
)

// readStream calls fn for every event of sid with seq <= until (0: all),
// in order, found through the per-stream index: one seek, then one
// lookup per event, however long the log.
func (e *Engine) readStream(tx *bolt.Tx, sid events.StreamID, until uint64, fn func(events.Envelope) error) error {
	return readStreamIn(tx.Bucket(bucketLog), e.proj.In(tx), sid, until, fn)
}

func readStreamIn(log *bolt.Bucket, v ProjectionTx, sid events.StreamID, until uint64, fn func(events.Envelope) error) error {
	var err error
	var key [8]byte
	v.StreamSeqs(sid, until, func(seq uint64) bool {
		binary.BigEndian.PutUint64(key[:], seq)
		rec := log.Get(key[:])
		if rec == nil {
			err = errs.New(errs.ECORRUPT, "%s: the stream index names seq %d, which the log does not hold", sid, seq)
			return false
		}
		var env events.Envelope
		if env, err = events.Decode(rec); err != nil {
			err = errs.Wrap(errs.ECORRUPT, err, "seq %d", seq)
			return false
		}
		if env.Stream != sid {
			err = errs.New(errs.ECORRUPT, "%s: the stream index names seq %d, an event of %s", sid, seq, env.Stream)
			return false
		}
		err = fn(env)
		return err == nil
	})
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

// ReadStreamUntil calls fn for every event of one stream with seq <=
// until (0: all), in order. Returning ErrStop from fn ends the read
// cleanly.
func (e *Engine) ReadStreamUntil(sid events.StreamID, until uint64, fn func(events.Envelope) error) error {
	return e.guard(func() error {
		return e.db.View(func(tx *bolt.Tx) error { return e.readStream(tx, sid, until, fn) })
	})
}

// SeqAt returns the seq of the last event recorded at or before t, or 0
// when the log holds none that early. It bisects the log (O(log n)
// lookups), which is exact only where records are in time order: they
// nearly are, but an event is stamped with its command's decision time
// (the sweep's, taken when it began) and the system clock can step back,
// so around such a place the answer may be a few events off
// (spec/engine.md, "Reading the past"). A seq is exact.
func (e *Engine) SeqAt(t time.Time) (uint64, error) {
	var at uint64
	err := e.guard(func() error {
		return e.db.View(func(tx *bolt.Tx) error {
			log := tx.Bucket(bucketLog)
			head := e.Head()
			var ferr error
			// The first seq recorded after t; everything before it is at or before t.
			n := sort.Search(int(head), func(i int) bool {
				if ferr != nil {
					return true
				}
				env, err := events.DecodeUnverified(log.Get(binary.BigEndian.AppendUint64(nil, uint64(i)+1)))
				if err != nil {
					ferr = errs.Wrap(errs.ECORRUPT, err, "seq %d", i+1)
					return true
				}
				return env.RecordedAt.After(t)
			})
			at = uint64(n)
			return ferr
		})
	})
	return at, err
}

// EventAt returns the event at seq.
func (e *Engine) EventAt(seq uint64) (events.Envelope, error) {
	var env events.Envelope
	err := e.guard(func() error {
		return e.db.View(func(tx *bolt.Tx) error {
			rec := tx.Bucket(bucketLog).Get(binary.BigEndian.AppendUint64(nil, seq))
			if rec == nil {
				return errs.New(errs.ENOENT, "the log holds no seq %d", seq)
			}
			var err error
			env, err = events.Decode(rec)
			return err
		})
	})
	return env, err
}

// ReadAsOf runs fn against the aggregates as they stood right after the
// event at seq until: each one folded from its own events up to until,
// found through the per-stream index, on demand. Nothing else of the log
// is read, and nothing is rebuilt.
func (e *Engine) ReadAsOf(until uint64, fn func(r *AsOf) error) error {
	if until == 0 || until > e.Head() {
		return errs.New(errs.EINVAL, "seq %d is not in the log (1..%d)", until, e.Head())
	}
	return e.guard(func() error {
		return e.db.View(func(tx *bolt.Tx) error {
			r := &AsOf{e: e, log: tx.Bucket(bucketLog), cur: e.proj.In(tx), until: until, states: map[events.StreamID]aggregate.State{}}
			if err := fn(r); err != nil {
				return err
			}
			return r.err
		})
	})
}

// AsOf is a Reader of the past: State folds an aggregate's events up to
// Until. Lookup and Scan answer as the indexes stood then: the
// aggregates that hold an entry now, together with those that may have
// held it then (see pastHolders), each folded and asked for its own
// entries as of then. DueBy answers nothing: deadlines are the sweep's
// present work.
type AsOf struct {
	e      *Engine
	log    *bolt.Bucket
	cur    ProjectionTx
	until  uint64
	states map[events.StreamID]aggregate.State
	// err is the first fold that failed inside Lookup or Scan, which
	// answer no error: ReadAsOf returns it, so an aggregate that cannot
	// be folded is an error and not a silent absence.
	err error
	// Events counts the events folded, for the benchmark.
	Events int
}

// Until is the seq the reader stands at.
func (r *AsOf) Until() uint64 { return r.until }

// State returns the aggregate as of Until, nil when it did not exist yet.
// Callers must not modify it.
func (r *AsOf) State(k events.Kind, id string) (aggregate.State, error) {
	sid := events.StreamID{Kind: k, ID: id}
	if s, ok := r.states[sid]; ok {
		return s, nil
	}
	var s aggregate.State
	err := readStreamIn(r.log, r.cur, sid, r.until, func(env events.Envelope) error {
		p, err := events.DecodePayload(&env)
		if err != nil {
			return errs.Wrap(errs.ECORRUPT, err, "seq %d", env.Seq)
		}
		r.Events++
		s, err = aggregate.Apply(r.e.ms, s, &env, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	r.states[sid] = s
	return s, nil
}

// Lookup returns the aggregates whose entry in index equalled key then.
func (r *AsOf) Lookup(idx, key string) []index.Ref {
	return r.entries(idx, func(k string) bool { return k == key }, r.candidates(idx, key, true))
}

// Scan returns the entries of index whose key started with prefix then,
// in key order.
func (r *AsOf) Scan(idx, prefix string) []index.Ref {
	return r.entries(idx, func(k string) bool { return strings.HasPrefix(k, prefix) }, r.candidates(idx, prefix, false))
}

// DueBy answers nothing: see AsOf.
func (r *AsOf) DueBy(time.Time) []index.Due { return nil }

// candidates are the aggregates that may have held an entry of idx under
// key (or under any key starting with it, when !exact) at Until: those
// that hold one now, and pastHolders.
func (r *AsOf) candidates(idx, key string, exact bool) []index.Ref {
	var refs []index.Ref
	if exact {
		refs = r.cur.Lookup(idx, key)
	} else {
		refs = r.cur.Scan(idx, key)
	}
	return append(refs, r.pastHolders(idx, key)...)
}

// pastHolders finds the aggregates that may have held an entry they no
// longer hold. Entries that an aggregate keeps for good (batch.attempts,
// batch.thread, job.thread, task.job) need none: whoever held one then
// holds it now. The thread's FIFO (thread.open) is found among the
// thread's batches (batch.thread), and its live attempt (thread.attempt)
// among the attempts of its open batches then: a batch's live attempt
// ends when the batch closes.
func (r *AsOf) pastHolders(idx, key string) []index.Ref {
	switch idx {
	case index.ThreadOpen:
		return r.cur.Scan(index.BatchThread, key)
	case index.ThreadLive:
		var out []index.Ref
		for _, b := range r.Scan(index.ThreadOpen, index.ThreadPrefix(key)) {
			out = append(out, r.cur.Lookup(index.BatchAttempts, b.ID)...)
		}
		return out
	}
	return nil
}

// entries folds each candidate and keeps its entries of idx that match.
func (r *AsOf) entries(idx string, match func(string) bool, refs []index.Ref) []index.Ref {
	var out []index.Ref
	seen := map[events.StreamID]bool{}
	for _, ref := range refs {
		sid := events.StreamID{Kind: ref.Kind, ID: ref.ID}
		if seen[sid] {
			continue
		}
		seen[sid] = true
		s, err := r.State(ref.Kind, ref.ID)
		if err != nil && r.err == nil {
			r.err = err
		}
		ix, ok := s.(aggregate.Indexer)
		if err != nil || s == nil || !ok {
			continue
		}
		for _, en := range ix.Indexes() {
			if en.Index == idx && match(en.Key) {
				out = append(out, index.Ref{Key: en.Key, Kind: ref.Kind, ID: ref.ID})
			}
		}
	}
	slices.SortFunc(out, func(a, b index.Ref) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return strings.Compare(string(a.Kind)+"\x00"+a.ID, string(b.Kind)+"\x00"+b.ID)
	})
	return out
}
