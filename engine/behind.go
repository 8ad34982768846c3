package engine

import (
	"context"
	"encoding/binary"
	"maps"
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

// Write-behind read models. An append's transaction writes the log
// records only: every read model written there costs page writes, and
// page writes are what the flush of a commit costs. What a committed
// group changes in the read models joins a delta held in memory, which
// readers see over the stored read models (overlay), and which a later
// transaction of its own writes to them (flush). A crash loses only the
// delta; Open folds the log after the stored checkpoint in again.

// flushStreams and flushEvents bound the delta: past either, the writer
// flushes before its next batch. Nothing else starts a flush but Close
// and the requests that need the stored read models whole: no timer, so
// which transaction is a home's newest follows from what was asked of it
// alone (the rolled-back-commit tests depend on that), and a quiet
// daemon's delta costs only its memory, at most the bounds.
const (
	flushStreams = 256
	flushEvents  = 2048
)

// delta is the read-model changes of committed groups that the stored
// read models do not hold yet. Once published (Engine.pub) it is never
// modified: the writer changes a copy and publishes that.
type delta struct {
	from   uint64 // the stored checkpoint it was built on
	head   uint64 // the last seq it covers
	states map[events.StreamID]deltaState
	// seqs are each stream's seqs after from, for the per-stream index.
	seqs     map[events.StreamID][]uint64
	commands map[string]CommandRange
	events   int
}

// deltaState is one aggregate in the delta: its latest state, the state
// stored in the read models (nil when none), and the index and deadline
// keys of the latest state in the order the stored keys sort.
type deltaState struct {
	base, cur aggregate.State
	ix, dl    []string
}

func emptyDelta(from uint64) *delta {
	return &delta{from: from, head: from, states: map[events.StreamID]deltaState{},
		seqs: map[events.StreamID][]uint64{}, commands: map[string]CommandRange{}}
}

func (d *delta) empty() bool { return d.events == 0 }

// due reports whether the writer should flush d before its next batch.
func (d *delta) due() bool {
	return !d.empty() && (len(d.states) >= flushStreams || d.events >= flushEvents)
}

// clone is a copy the writer may change. Slices and states are shared:
// they are replaced, never changed in place.
func (d *delta) clone() *delta {
	c := *d
	c.states = make(map[events.StreamID]deltaState, len(d.states)+8)
	for k, v := range d.states {
		c.states[k] = v
	}
	c.seqs = make(map[events.StreamID][]uint64, len(d.seqs)+8)
	for k, v := range d.seqs {
		c.seqs[k] = v
	}
	c.commands = make(map[string]CommandRange, len(d.commands))
	for k, v := range d.commands {
		c.commands[k] = v
	}
	return &c
}

// put records cur as the latest state of its aggregate; old is the state
// it replaces, stored when the aggregate is not in the delta yet.
func (d *delta) put(old, cur aggregate.State) {
	sid := events.StreamID{Kind: aggregate.KindOf(cur), ID: cur.Head().ID}
	base := old
	if p, ok := d.states[sid]; ok {
		base = p.base
	}
	d.states[sid] = deltaState{base: base, cur: cur, ix: indexKeys(sid, cur), dl: deadlineKeys(sid, cur)}
}

// putFolded is put for a state folded from the log after the stored
// checkpoint, whose stored state the delta does not know yet: the stored
// one is read when the delta is flushed; until then the delta is read
// only by the fold itself, which asks for states only.
func (d *delta) putFolded(cur aggregate.State) { d.put(nil, cur) }

func (d *delta) putSeq(sid events.StreamID, seq uint64) {
	d.seqs[sid] = append(slices.Clip(d.seqs[sid]), seq)
	d.head = seq
	d.events++
}

// putCommand extends the range of an idempotency key; stored is the
// range the stored read models hold.
func (d *delta) putCommand(id string, seq uint64, stored func(string) (CommandRange, bool)) {
	r, ok := d.commands[id]
	if !ok {
		r, ok = stored(id)
	}
	if !ok {
		r.First = seq
	}
	r.Last = seq
	d.commands[id] = r
}

// indexKeys are a state's index entries as stored (index.EntryKey),
// in the order the stored index sorts them, each once.
func indexKeys(sid events.StreamID, s aggregate.State) []string {
	ix, ok := s.(aggregate.Indexer)
	if !ok {
		return nil
	}
	var out []string
	for _, e := range ix.Indexes() {
		out = append(out, index.EntryKey(e.Index, index.Ref{Key: e.Key, Kind: sid.Kind, ID: sid.ID}))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// deadlineKeys are a state's deadlines as stored (index.DueKey), in the
// order the stored deadline index sorts them, each once.
func deadlineKeys(sid events.StreamID, s aggregate.State) []string {
	dl, ok := s.(aggregate.Deadliner)
	if !ok {
		return nil
	}
	var out []string
	for _, d := range dl.Deadlines() {
		if !d.At.IsZero() {
			out = append(out, index.DueKey(index.Due{At: d.At, Kind: sid.Kind, ID: sid.ID, Name: d.Name}))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// dueAt is the due time of a stored deadline key, as the nanoseconds its
// first 8 bytes hold.
func dueAt(k string) uint64 { return binary.BigEndian.Uint64([]byte(k[:8])) }

// overlay is the stored read models with a delta over them: what every
// reader and the writer see. It answers exactly what the stored read
// models would once the delta is flushed.
type overlay struct {
	ProjectionTx // the stored read models
	d            *delta
}

// view is the read models of tx with d over them. A d that the stored
// read models already hold (flushed after d was taken) is left out.
func (e *Engine) view(tx *bolt.Tx, d *delta) ProjectionTx {
	base := e.proj.In(tx)
	if d == nil || d.empty() || base.Checkpoint() >= d.head {
		return base
	}
	return overlay{ProjectionTx: base, d: d}
}

// readTx runs fn in a read transaction with the read models as committed
// when it began. The delta is taken before the transaction begins: a
// delta is published only after its log records commit, so the
// transaction holds every event the delta names.
func (e *Engine) readTx(fn func(tx *bolt.Tx, v ProjectionTx) error) error {
	d := e.pub.Load()
	return e.db.View(func(tx *bolt.Tx) error { return fn(tx, e.view(tx, d)) })
}

func (o overlay) in(k events.Kind, id string) bool {
	_, ok := o.d.states[events.StreamID{Kind: k, ID: id}]
	return ok
}

func (o overlay) State(k events.Kind, id string) (aggregate.State, error) {
	if ds, ok := o.d.states[events.StreamID{Kind: k, ID: id}]; ok {
		return aggregate.Clone(ds.cur), nil
	}
	return o.ProjectionTx.State(k, id)
}

func (o overlay) Lookup(idx, key string) []index.Ref {
	return o.refs(idx, index.EntryPrefix(idx, key+"\x00"), o.ProjectionTx.Lookup(idx, key))
}

func (o overlay) Scan(idx, prefix string) []index.Ref {
	return o.refs(idx, index.EntryPrefix(idx, prefix), o.ProjectionTx.Scan(idx, prefix))
}

// refs merges the stored entries under prefix, less those of aggregates
// in the delta, with the delta's.
func (o overlay) refs(idx, prefix string, stored []index.Ref) []index.Ref {
	var keys []string
	for _, r := range stored {
		if !o.in(r.Kind, r.ID) {
			keys = append(keys, index.EntryKey(idx, r))
		}
	}
	for _, ds := range o.d.states {
		for _, k := range ds.ix {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	var out []index.Ref
	for _, k := range keys {
		if r, ok := index.ParseEntryKey(k); ok {
			out = append(out, r)
		}
	}
	return out
}

func (o overlay) DueBy(now time.Time) []index.Due {
	limit := uint64(now.UnixNano())
	var keys []string
	for _, d := range o.ProjectionTx.DueBy(now) {
		if !o.in(d.Kind, d.ID) {
			keys = append(keys, index.DueKey(d))
		}
	}
	for _, ds := range o.d.states {
		for _, k := range ds.dl {
			if dueAt(k) <= limit {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	out := make([]index.Due, 0, len(keys))
	for _, k := range keys {
		if d, ok := index.ParseDueKey(k); ok {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (o overlay) NextDue() (index.Due, bool) {
	d, ok := o.ProjectionTx.NextDue()
	return o.nextDue(d, ok, 0, false)
}

func (o overlay) NextDueAfter(t time.Time) (index.Due, bool) {
	d, ok := o.ProjectionTx.NextDueAfter(t)
	return o.nextDue(d, ok, uint64(t.UnixNano())+1, true)
}

// nextDue is the earliest deadline at or after from (when after is set):
// the first stored one d not of an aggregate in the delta, or the delta's
// first, whichever sorts first.
func (o overlay) nextDue(d index.Due, ok bool, from uint64, after bool) (index.Due, bool) {
	best := ""
	for ok && best == "" {
		// Among the stored deadlines due at d.At, the first not replaced.
		at := uint64(d.At.UnixNano())
		for _, c := range o.ProjectionTx.DueBy(d.At) {
			if uint64(c.At.UnixNano()) == at && !o.in(c.Kind, c.ID) && (!after || at >= from) {
				best = index.DueKey(c)
				break
			}
		}
		if best == "" {
			d, ok = o.ProjectionTx.NextDueAfter(d.At)
		}
	}
	for _, ds := range o.d.states {
		for _, k := range ds.dl {
			if after && dueAt(k) < from {
				continue
			}
			if best == "" || k < best {
				best = k
			}
			break // ds.dl is sorted: the rest come later
		}
	}
	if best == "" {
		return index.Due{}, false
	}
	return index.ParseDueKey(best)
}

func (o overlay) Count(name string) uint64 {
	n := int64(o.ProjectionTx.Count(name))
	for _, ds := range o.d.states {
		if counts(ds.base, name) {
			n--
		}
		if counts(ds.cur, name) {
			n++
		}
	}
	return uint64(max(n, 0))
}

func counts(s aggregate.State, name string) bool {
	c, ok := s.(aggregate.Counter)
	return ok && s != nil && slices.Contains(c.Counts(), name)
}

func (o overlay) ForEach(k events.Kind, fn func(aggregate.State) error) error {
	return o.ForEachAfter(k, "", fn)
}

// ForEachAfter merges the stored aggregates of kind k with the delta's,
// in id order, the delta's replacing the stored.
func (o overlay) ForEachAfter(k events.Kind, after string, fn func(aggregate.State) error) error {
	var ids []string
	for sid := range o.d.states {
		if sid.Kind == k && sid.ID > after {
			ids = append(ids, sid.ID)
		}
	}
	sort.Strings(ids)
	emit := func(id string) error {
		return fn(aggregate.Clone(o.d.states[events.StreamID{Kind: k, ID: id}].cur))
	}
	err := o.ProjectionTx.ForEachAfter(k, after, func(s aggregate.State) error {
		id := s.Head().ID
		for len(ids) > 0 && ids[0] < id {
			if err := emit(ids[0]); err != nil {
				return err
			}
			ids = ids[1:]
		}
		if len(ids) > 0 && ids[0] == id {
			ids = ids[1:]
			return emit(id)
		}
		return fn(s)
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := emit(id); err != nil {
			return err
		}
	}
	return nil
}

func (o overlay) Command(id string) (CommandRange, bool) {
	if r, ok := o.d.commands[id]; ok {
		return r, true
	}
	return o.ProjectionTx.Command(id)
}

func (o overlay) StreamSeqs(sid events.StreamID, until uint64, fn func(seq uint64) bool) {
	more := true
	o.ProjectionTx.StreamSeqs(sid, until, func(seq uint64) bool {
		more = fn(seq)
		return more
	})
	if !more {
		return
	}
	for _, seq := range o.d.seqs[sid] {
		if until > 0 && seq > until || !fn(seq) {
			return
		}
	}
}

func (o overlay) Checkpoint() uint64 { return o.d.head }

// flush writes the published delta to the stored read models in a
// transaction of its own, in the writer's turn, and publishes an empty
// one. Each aggregate's stored state is read in that transaction, so
// what it derived moves to what its latest state derives.
func (e *Engine) flush() error {
	d := e.pub.Load()
	if d.empty() {
		return nil
	}
	if err := e.Damaged(); err != nil {
		return err
	}
	sids := make([]events.StreamID, 0, len(d.seqs))
	for sid := range d.seqs {
		sids = append(sids, sid)
	}
	slices.SortFunc(sids, func(a, b events.StreamID) int { return strings.Compare(string(a.Key()), string(b.Key())) })
	err := e.guard(func() error {
		return e.db.Update(func(tx *bolt.Tx) error {
			ptx := e.proj.In(tx)
			for _, sid := range sids {
				if ds, ok := d.states[sid]; ok {
					old, err := ptx.State(sid.Kind, sid.ID)
					if err != nil {
						return err
					}
					if err := ptx.Put(old, ds.cur); err != nil {
						return err
					}
				}
				for _, seq := range d.seqs[sid] {
					if err := ptx.PutStreamSeq(sid, seq); err != nil {
						return err
					}
				}
			}
			for _, id := range slices.Sorted(maps.Keys(d.commands)) {
				// PutCommand extends a stored range: First then Last
				// leaves exactly the delta's range.
				r := d.commands[id]
				if err := ptx.PutCommand(id, r.First); err != nil {
					return err
				}
				if err := ptx.PutCommand(id, r.Last); err != nil {
					return err
				}
			}
			if err := ptx.SetCheckpoint(d.head); err != nil {
				return err
			}
			return e.tendReserve(tx)
		})
	})
	if err != nil {
		e.log.Error("flush the read models", "err", err)
		return err
	}
	e.pub.Store(emptyDelta(d.head))
	return nil
}

// Flush writes the read-model changes held in memory to the stored read
// models, in the writer's turn: for readers of the stored buckets
// themselves (tests, tools), and before anything that needs them whole.
func (e *Engine) Flush(ctx context.Context) error {
	return e.exclusiveDB(ctx, func(*bolt.DB) error { return nil })
}

// catchUp folds the events after the stored checkpoint into the delta
// and flushes it: after a crash the stored read models are behind the
// log by the delta that was lost. Read models of another version are
// left to Rebuild (ProjectionsCurrent).
func (e *Engine) catchUp() error {
	var d *delta
	err := e.guard(func() error {
		return e.db.View(func(tx *bolt.Tx) error {
			base := e.proj.In(tx)
			if base.Version() != e.proj.Version() || base.Checkpoint() >= e.lastSeq {
				return nil
			}
			d = emptyDelta(base.Checkpoint())
			v := overlay{ProjectionTx: base, d: d}
			return walkLog(tx, d.from+1, func(env events.Envelope) error {
				p, err := events.DecodePayload(&env)
				if err != nil {
					return errs.Wrap(errs.ECORRUPT, err, "seq %d", env.Seq)
				}
				old, err := v.State(env.Stream.Kind, env.Stream.ID) // a copy
				if err != nil {
					return err
				}
				cur, err := aggregate.Apply(e.ms, old, &env, p)
				if err != nil {
					return err
				}
				d.putFolded(cur)
				d.putSeq(env.Stream, env.Seq)
				if env.CommandID != "" {
					d.putCommand(env.CommandID, env.Seq, base.Command)
				}
				return nil
			})
		})
	})
	if err != nil || d == nil {
		return err
	}
	e.pub.Store(d)
	return e.flush()
}
