package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"sort"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	bolt "go.etcd.io/bbolt"
)

// replayChunk is how many records one decode job holds.
const replayChunk = 512

type decoded struct {
	key  uint64
	env  events.Envelope
	p    events.Payload
	err  error
	hash events.Hash // stored hash, for the chain check
}

// scanLog decodes the log on every core and hands events to fn strictly in
// seq order. With check set, every record's own hash is recomputed;
// otherwise replay trusts records that Verify walks separately.
func scanLog(ctx context.Context, tx *bolt.Tx, check bool, fn func(d *decoded) error) error {
	type job struct {
		recs [][]byte
		keys []uint64
		out  chan []decoded
	}
	workers := runtime.GOMAXPROCS(0)
	jobs := make(chan job, workers*2)
	ordered := make(chan chan []decoded, workers*4)
	stop := make(chan struct{})
	defer close(stop)

	for i := 0; i < workers; i++ {
		go func() {
			for j := range jobs {
				out := make([]decoded, len(j.recs))
				for i, rec := range j.recs {
					d := &out[i]
					d.key = j.keys[i]
					// The record lies in the file's mapping: decode it
					// inside the recover boundary.
					if p := catch(func() {
						if check {
							d.env, d.err = events.Decode(rec)
						} else {
							d.env, d.err = events.DecodeUnverified(rec)
						}
						if d.err == nil {
							d.hash = d.env.Hash
							d.p, d.err = events.DecodePayload(&d.env)
						}
					}); p != nil {
						d.err = errs.New(errs.ECORRUPT, "seq %d: reading the record failed (%v)", d.key, p)
					}
				}
				j.out <- out
			}
		}()
	}
	go func() {
		defer close(ordered)
		defer close(jobs)
		c := tx.Bucket(bucketLog).Cursor()
		j := job{}
		flush := func() bool {
			if len(j.recs) == 0 {
				return true
			}
			j.out = make(chan []decoded, 1)
			select {
			case ordered <- j.out:
			case <-stop:
				return false
			}
			select {
			case jobs <- j:
			case <-stop:
				return false
			}
			j = job{}
			return true
		}
		// The cursor walks the file's pages on this goroutine: inside the
		// recover boundary, with a panic handed on as the last record.
		if p := catch(func() {
			for k, v := c.First(); k != nil; k, v = c.Next() {
				j.recs = append(j.recs, v)
				j.keys = append(j.keys, binary.BigEndian.Uint64(k))
				if len(j.recs) == replayChunk && !flush() {
					return
				}
			}
		}); p != nil {
			j = job{}
			out := make(chan []decoded, 1)
			out <- []decoded{{err: errs.New(errs.ECORRUPT, "walking the log failed inside bbolt (%v)", p)}}
			select {
			case ordered <- out:
			case <-stop:
			}
			return
		}
		flush()
	}()
	for ch := range ordered {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch := <-ch
		for i := range batch {
			if err := fn(&batch[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// memory is the result of replaying a log into memory.
type memory struct {
	ms       *fsm.Machines
	states   map[events.StreamID]aggregate.State
	commands map[string]CommandRange
	streams  map[events.StreamID][]uint64 // each stream's seqs, for the per-stream index
	last     uint64
	lastHash events.Hash
	count    uint64
}

func newMemory(ms *fsm.Machines) *memory {
	return &memory{ms: ms, states: map[events.StreamID]aggregate.State{}, commands: map[string]CommandRange{},
		streams: map[events.StreamID][]uint64{}}
}

// apply folds one event in, validating it through the machines.
func (m *memory) apply(d *decoded) error {
	if d.err != nil {
		return d.err
	}
	s, err := aggregate.Apply(m.ms, m.states[d.env.Stream], &d.env, d.p)
	if err != nil {
		return err
	}
	m.states[d.env.Stream] = s
	m.streams[d.env.Stream] = append(m.streams[d.env.Stream], d.env.Seq)
	if id := d.env.CommandID; id != "" {
		r, ok := m.commands[id]
		if !ok {
			r.First = d.env.Seq
		}
		r.Last = d.env.Seq
		m.commands[id] = r
	}
	m.last, m.lastHash = d.env.Seq, d.hash
	m.count++
	return nil
}

func (m *memory) image(p Projections) (Image, error) {
	list := make([]aggregate.State, 0, len(m.states))
	for _, s := range m.states {
		list = append(list, s)
	}
	return p.ImageOf(list, m.commands, m.streams, m.last)
}

// RebuildStats reports what a Rebuild did.
type RebuildStats struct {
	Events     uint64 `json:"events"`
	Aggregates int    `json:"aggregates"`
	Checkpoint uint64 `json:"checkpoint"`
}

// rebuildChunk is how many projection keys one transaction of Rebuild
// writes. One transaction for a whole large log held every page it wrote
// in memory until its commit (2.2 GiB for a million events); a chunk
// bounds that.
const rebuildChunk = 20000

// Rebuild drops every projection bucket and derives them again from the
// log. It runs inside the writer, so no append interleaves with it. It
// writes in several transactions; the projections count as current only
// once the last one committed (see Projections.WriteImageChunked), so a
// crash halfway leaves them to be rebuilt again.
func (e *Engine) Rebuild(ctx context.Context) (RebuildStats, error) {
	var st RebuildStats
	err := e.exclusiveDB(ctx, func(db *bolt.DB) error {
		var img Image
		err := db.View(func(tx *bolt.Tx) error {
			var err error
			img, st, err = e.replayImage(ctx, tx, 0)
			return err
		})
		if err != nil {
			return err
		}
		// Only the image is held now, not the replayed states.
		return e.proj.WriteImageChunked(db, img, rebuildChunk)
	})
	return st, err
}

// ReplayImage replays the log into memory, up to and including seq until
// (0 means all), and returns the projection image it derives, without
// touching the stored projections.
func (e *Engine) ReplayImage(ctx context.Context, until uint64) (Image, RebuildStats, error) {
	var img Image
	var st RebuildStats
	err := e.guard(func() error {
		return e.db.View(func(tx *bolt.Tx) error {
			var err error
			img, st, err = e.replayImage(ctx, tx, until)
			return err
		})
	})
	return img, st, err
}

func (e *Engine) replayImage(ctx context.Context, tx *bolt.Tx, until uint64) (Image, RebuildStats, error) {
	m := newMemory(e.ms)
	err := scanLog(ctx, tx, false, func(d *decoded) error {
		if until > 0 && d.key > until {
			return ErrStop
		}
		return m.apply(d)
	})
	if err != nil && err != ErrStop {
		return nil, RebuildStats{}, fmt.Errorf("replay: %w", err)
	}
	st := RebuildStats{Events: m.count, Aggregates: len(m.states), Checkpoint: m.last}
	img, err := m.image(e.proj)
	return img, st, err
}

// exclusive runs fn in its own write transaction inside the writer.
func (e *Engine) exclusive(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	return e.exclusiveDB(ctx, func(db *bolt.DB) error { return db.Update(fn) })
}

// exclusiveDB runs fn inside the writer with the file to itself: it may
// commit several transactions, and no other request commits meanwhile.
func (e *Engine) exclusiveDB(ctx context.Context, fn func(db *bolt.DB) error) error {
	r := &request{exclusive: fn, expected: AnyVersion}
	_, err := e.submit(ctx, r)
	return err
}

// Problem is one finding of Verify.
type Problem struct {
	Seq     uint64    `json:"seq,omitempty"`
	Code    errs.Code `json:"code"`
	Message string    `json:"message"`
}

// Report is the result of Verify.
type Report struct {
	Events   uint64    `json:"events"`
	Head     uint64    `json:"head"`
	HeadHash string    `json:"head_hash"`
	Problems []Problem `json:"problems"`
}

// MarshalJSON writes problems as an array, empty on a clean log, never
// null: spec/cli.md shows the shape, and scripts index it.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report
	if r.Problems == nil {
		r.Problems = []Problem{}
	}
	return json.Marshal(plain(r))
}

// OK reports whether Verify found nothing wrong.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// maxProblems bounds a report on a badly damaged log.
const maxProblems = 100

func (r *Report) add(seq uint64, code errs.Code, format string, args ...any) {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, Problem{Seq: seq, Code: code, Message: fmt.Sprintf(format, args...)})
	}
}

// Verify walks the whole log: every record's hash, the chain of prev_hash
// links, seq continuity, stream version continuity and every transition
// through the state machines. It then checks that the stored projections
// equal a rebuild, that the log holds the last acknowledged head (see
// AckPath), and the file's structure (see checkStructure). A log that
// makes bbolt panic is reported as problems, not as an error.
//
// bbolt's check runs in a write transaction that is rolled back: in a
// read transaction it is only sound when no writer commits meanwhile,
// and the daemon keeps committing while an operator verifies. Appends
// wait for the check (not for the log walk before it).
func (e *Engine) Verify(ctx context.Context) (Report, error) {
	var rep Report
	var err error
	if p := catch(func() {
		err = e.db.View(func(tx *bolt.Tx) error {
			var err error
			rep, err = verifyTx(ctx, tx, e.ms, e.proj, nil)
			return err
		})
	}); p != nil {
		rep.add(0, errs.ECORRUPT, "reading the log failed inside bbolt (%v)", p)
	} else if err != nil {
		return rep, err
	}
	checkAck(e.path, e.db, &rep)
	for _, p := range checkStructure(e.db, func() (*bolt.Tx, error) { return e.db.Begin(true) }) {
		rep.add(0, errs.ECORRUPT, "%s", p)
	}
	return rep, nil
}

// VerifyFile verifies the log of a bbolt file that no daemon holds, opened
// read-only, so verification never changes what it checks; its read
// models are checked against what proj derives from a replay. A file
// that is missing or empty where a log was, or that bbolt cannot open, is
// a report with that problem.
func VerifyFile(ctx context.Context, proj Projections, path string, timeout time.Duration) (Report, error) {
	return VerifyFileProgress(ctx, proj, path, timeout, nil)
}

// VerifyFileProgress is VerifyFile calling progress (when not nil) with
// each seq the walk of the log reaches.
func VerifyFileProgress(ctx context.Context, proj Projections, path string, timeout time.Duration, progress func(seq uint64)) (Report, error) {
	var rep Report
	ack, _, hasAck, err := ReadAck(path)
	if err != nil {
		if errs.CodeOf(err) != errs.ECORRUPT {
			return rep, err
		}
		rep.add(0, errs.ECORRUPT, "%v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		if hasAck && (err == nil || errors.Is(err, fs.ErrNotExist)) {
			rep.add(0, errs.ECORRUPT, "the log %s is missing or empty, but %s records seq %d as acknowledged", path, AckPath(path), ack.Seq)
			return rep, nil
		}
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return rep, errs.New(errs.ENOENT, "%s holds no cbth log", path)
		}
		return rep, errs.Wrap(errs.EACCES, err, "stat %s", path)
	}
	db, err := openReadOnly(path, timeout)
	if err != nil {
		if errs.CodeOf(err) != errs.ECORRUPT {
			return rep, err
		}
		rep.add(0, errs.ECORRUPT, "%v", err)
		return rep, nil
	}
	defer db.Close()
	if p := catch(func() {
		err = db.View(func(tx *bolt.Tx) error {
			if tx.Bucket(bucketLog) == nil {
				return errs.New(errs.ENOENT, "%s holds no cbth log", path)
			}
			r, err := verifyTx(ctx, tx, fsm.New(), proj, progress)
			r.Problems = append(rep.Problems, r.Problems...)
			rep = r
			return err
		})
	}); p != nil {
		rep.add(0, errs.ECORRUPT, "reading the log failed inside bbolt (%v)", p)
	} else if err != nil {
		return rep, err
	}
	checkAck(path, db, &rep)
	// A read-only open: no writer exists, so a read transaction is sound.
	for _, p := range checkStructure(db, func() (*bolt.Tx, error) { return db.Begin(false) }) {
		rep.add(0, errs.ECORRUPT, "%s", p)
	}
	return rep, nil
}

// checkAck adds a problem when the log does not hold the acknowledged head
// recorded beside it.
func checkAck(path string, db *bolt.DB, rep *Report) {
	ack, _, ok, err := ReadAck(path)
	if err != nil {
		rep.add(0, errs.CodeOf(err), "%v", err)
		return
	}
	if !ok || ack.Seq == 0 {
		return
	}
	var at events.Hash
	var found bool
	var head uint64
	if p := catch(func() {
		_ = db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket(bucketLog); b != nil {
				if k, _ := b.Cursor().Last(); k != nil {
					head = binary.BigEndian.Uint64(k)
				}
				at, found = events.HashOf(b.Get(binary.BigEndian.AppendUint64(nil, ack.Seq)))
			}
			return nil
		})
	}); p != nil {
		return // the walk above reported it
	}
	switch {
	case head < ack.Seq:
		rep.add(ack.Seq, errs.ECORRUPT, "the log ends at seq %d, but seq %d was acknowledged (%s): committed transactions are gone", head, ack.Seq, AckPath(path))
	case !found || at != ack.Hash:
		rep.add(ack.Seq, errs.ECORRUPT, "the record at seq %d is not the one acknowledged (%s)", ack.Seq, AckPath(path))
	}
}

func verifyTx(ctx context.Context, tx *bolt.Tx, ms *fsm.Machines, proj Projections, progress func(uint64)) (Report, error) {
	var rep Report
	add := rep.add
	m := newMemory(ms)
	var prev events.Hash
	var prevSeq uint64
	broken := false
	err := scanLog(ctx, tx, true, func(d *decoded) error {
		if d.key == 0 { // the walk itself failed; nothing follows
			add(0, errs.ECORRUPT, "%v", d.err)
			broken = true
			return nil
		}
		rep.Events++
		if progress != nil {
			progress(d.key)
		}
		if d.key != prevSeq+1 {
			add(d.key, errs.ECORRUPT, "seq gap: %d follows %d", d.key, prevSeq)
		}
		if d.err != nil {
			add(d.key, errs.ECORRUPT, "seq %d: %v", d.key, d.err)
			broken = true
			prevSeq = d.key
			prev, _ = events.HashOf(tx.Bucket(bucketLog).Get(binary.BigEndian.AppendUint64(nil, d.key)))
			return nil
		}
		if d.env.Seq != d.key {
			add(d.key, errs.ECORRUPT, "seq %d stored under key %d", d.env.Seq, d.key)
		}
		if d.env.PrevHash != prev {
			add(d.key, errs.ECORRUPT, "seq %d: prev_hash does not match the hash of seq %d", d.key, prevSeq)
		}
		prev, prevSeq = d.hash, d.key
		if broken {
			return nil // states after a corrupt record cannot be trusted
		}
		if err := m.apply(d); err != nil {
			add(d.key, errs.CodeOf(err), "seq %d: %v", d.key, err)
			broken = true
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	rep.Head, rep.HeadHash = prevSeq, prev.String()
	if !broken {
		want, err := m.image(proj)
		if err != nil {
			return rep, err
		}
		got, err := proj.ReadImage(tx)
		if err != nil {
			return rep, err
		}
		for _, d := range Diff(got, want, 10) {
			add(0, errs.ECORRUPT, "projection differs from a rebuild: %s", d)
		}
	}
	return rep, nil
}

// Replayer folds events into aggregate states in memory, validating every
// transition through the state machines, without a log file: for audit
// tools that replay an exported log or a page stream up to a point.
type Replayer struct{ m *memory }

// NewReplayer returns an empty replayer.
func NewReplayer() *Replayer { return &Replayer{m: newMemory(fsm.New())} }

// Apply folds one event in. Events must arrive in seq order.
func (r *Replayer) Apply(env events.Envelope) error {
	p, err := events.DecodePayload(&env)
	if err != nil {
		return err
	}
	d := decoded{key: env.Seq, env: env, p: p, hash: env.Hash}
	return r.m.apply(&d)
}

// Events is how many events were applied.
func (r *Replayer) Events() uint64 { return r.m.count }

// Last is the seq of the last applied event.
func (r *Replayer) Last() uint64 { return r.m.last }

// States returns every aggregate's state, grouped by kind and sorted by id.
func (r *Replayer) States() map[events.Kind][]aggregate.State {
	out := map[events.Kind][]aggregate.State{}
	for sid, s := range r.m.states {
		out[sid.Kind] = append(out[sid.Kind], s)
	}
	for _, list := range out {
		sort.Slice(list, func(i, j int) bool { return list[i].Head().ID < list[j].Head().ID })
	}
	return out
}
