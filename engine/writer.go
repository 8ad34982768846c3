package engine

// The writer: commands and their decisions, the queue of requests, the
// leader that group-commits what is queued in one bbolt transaction, and
// the view a decider reads inside it (spec/engine.md, "Appends").

import (
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	bolt "go.etcd.io/bbolt"
)

// maxBatch bounds how many queued requests one commit takes.
const maxBatch = 1024

// maxCache bounds the writer's cache of committed aggregate states. When
// full it is simply emptied: the cache saves decoding, it holds no truth.
// It only needs to hold the streams in flight (a job between submit and
// delivery, a batch and its attempts). At 1<<16 the cache of a busy daemon
// held some 40 MB of finished jobs that every GC cycle had to scan; under
// the daemon's 64 MiB soft limit that cost a third more CPU per append.
const maxCache = 1 << 10

// Meta describes who issued a command and how to deduplicate it.
type Meta struct {
	Actor events.Actor
	// CommandID is the idempotency key: a command retried with a CommandID
	// already in the log returns the original result and appends nothing.
	CommandID     string
	CorrelationID string
}

// Emit is one event a command produces.
type Emit struct {
	Stream  events.StreamID
	Payload events.Payload
}

// Decision is the outcome of a pure command.
type Decision struct {
	Emits []Emit
	// Outcome is a short machine word for the caller, e.g. "already_closed".
	Outcome Outcome
	// value is what the command answers with besides its events, set
	// through its Answers (read with Exec).
	value any
}

// Outcome is a decision's short machine word for its caller. Each
// command names its own (engine/command); callers compare with those
// names, never with a string.
type Outcome string

// Replayed is the outcome of a command whose idempotency key was already
// in the log: it appended nothing and returns the events it produced the
// first time.
const Replayed Outcome = "replayed"

// Answers marks a command whose decision answers with a value of type V
// besides its events and outcome: embed it in the command's struct and
// return c.Answer(decision, v). The command and its callers (Exec) then
// agree on V at compile time.
type Answers[V any] struct{}

// Answer returns d answering with v.
func (Answers[V]) Answer(d Decision, v V) Decision {
	d.value = v
	return d
}

func (Answers[V]) answers(V) {}

// The marker method is what Answerer asks of a command.
var _ interface{ answers(struct{}) } = Answers[struct{}]{}

// ExecAt is Exec deciding at now (ExecuteAt).
func ExecAt[V any, C Answerer[V]](ctx context.Context, e *Engine, m Meta, now time.Time, c C) (V, Result, error) {
	res, err := e.ExecuteAt(ctx, m, now, c)
	v, _ := res.value.(V)
	return v, res, err
}

// ExecVia is Exec for a command handed to the log through via, a command
// that wraps it (an MCP tool call's record) and passes its decision on.
func ExecVia[V any, C Answerer[V]](ctx context.Context, e *Engine, m Meta, c C, via func(Decider) Decider) (V, Result, error) {
	res, err := e.Execute(ctx, m, via(c))
	v, _ := res.value.(V)
	return v, res, err
}

// AnswerOf is the value decision d of command c answers with (the zero V
// if none): for a command that wraps another and passes its decision on.
func AnswerOf[V any, C Answerer[V]](c C, d Decision) V {
	v, _ := d.value.(V)
	return v
}

// Answerer is a command whose decisions answer with a V (it embeds
// Answers[V]).
type Answerer[V any] interface {
	Decider
	answers(V)
}

// Exec runs c like Execute and returns the value its decision answered
// with. A decision that answered with none, and a replayed command (its
// idempotency key already in the log: Result.Replayed), give the zero V.
func Exec[V any, C Answerer[V]](ctx context.Context, e *Engine, m Meta, c C) (V, Result, error) {
	res, err := e.Execute(ctx, m, c)
	v, _ := res.value.(V)
	return v, res, err
}

// Decider is a pure command: the same view and now always give the same
// decision. It must not mutate what the view returns.
type Decider interface {
	Decide(v View, now time.Time) (Decision, error)
}

// DeciderFunc adapts a function to Decider.
type DeciderFunc func(v View, now time.Time) (Decision, error)

// Decide calls f.
func (f DeciderFunc) Decide(v View, now time.Time) (Decision, error) { return f(v, now) }

// Result is what Append and Execute return.
type Result struct {
	Events   []events.Envelope
	Replayed bool // the CommandID was already in the log; nothing appended
	Outcome  Outcome
	value    any // the decision's answer (Exec)
}

// AnyVersion skips the expected-version check of Append.
const AnyVersion = ^uint64(0)

type request struct {
	meta     Meta
	decider  Decider
	emits    []Emit
	enc      []encoded // emits already encoded by the caller, or nil
	stream   events.StreamID
	expected uint64
	now      time.Time // fixed time for replayed scripts; zero means clock
	// exclusive, when set, runs alone, with the file to itself: no
	// other request commits while it runs.
	exclusive func(db *bolt.DB) error

	res  Result
	err  error
	done chan struct{}
}

// Execute runs a command inside the writer, so it decides on the latest
// state and cannot conflict. An illegal transition returns an ESTATE error
// and appends nothing.
func (e *Engine) Execute(ctx context.Context, meta Meta, d Decider) (Result, error) {
	return e.submit(ctx, &request{meta: meta, decider: d, expected: AnyVersion})
}

// ExecuteAt is Execute with a fixed decision time instead of the clock:
// for the sweep, which records the now it used, and for tests.
func (e *Engine) ExecuteAt(ctx context.Context, meta Meta, now time.Time, d Decider) (Result, error) {
	return e.submit(ctx, &request{meta: meta, decider: d, expected: AnyVersion, now: now})
}

func (e *Engine) submit(ctx context.Context, r *request) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	r.done = make(chan struct{})
	e.qmu.Lock()
	if e.isClosed {
		e.qmu.Unlock()
		return Result{}, errs.New(errs.EHOSTDOWN, "engine is closed")
	}
	e.queue = append(e.queue, r)
	lead := !e.leading
	if lead {
		e.leading = true
		e.leaders.Add(1)
	}
	e.qmu.Unlock()
	if lead {
		e.lead(r)
	}
	// Once queued, the request will be committed or failed; waiting for
	// it (rather than honouring ctx) means no caller sees an unknown
	// outcome.
	<-r.done
	return r.res, r.err
}

func isDone(r *request) bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (e *Engine) queued() int {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	return len(e.queue)
}

// lead commits queued requests until the queue is empty, then gives up
// leadership. Requests queued while a commit runs form the next batch:
// group commit without a timer. A submitter leads only until its own
// request is committed; if more is queued by then it hands the lead to a
// new goroutine, so under sustained load no caller waits on others'
// commits for ever.
func (e *Engine) lead(own *request) {
	for {
		// Submitters woken by the last commit may be runnable but not yet
		// scheduled (two cores, many goroutines): yield while the queue
		// keeps growing so they join this commit, at the cost of a
		// scheduler pass, never of a timer. With one request queued after
		// a commit of one, nobody is about to join, and the yield (a
		// scheduler wake-up) is skipped.
		for i, n := 0, e.queued(); i < 3 && n > 0 && n < maxBatch && (n > 1 || e.lastBatch > 1); i++ {
			runtime.Gosched()
			m := e.queued()
			if m == n {
				break
			}
			n = m
		}
		e.qmu.Lock()
		if len(e.queue) == 0 {
			e.leading = false
			e.qmu.Unlock()
			e.leaders.Done()
			return
		}
		if own != nil && isDone(own) {
			e.qmu.Unlock()
			go e.lead(nil) // still leading: the count in e.leaders moves with it
			return
		}
		n := min(len(e.queue), maxBatch)
		batch := e.queue[:n:n]
		e.queue = append([]*request(nil), e.queue[n:]...)
		e.qmu.Unlock()
		e.commit(batch)
	}
}

// commit runs the batch: consecutive ordinary requests share one
// transaction; an exclusive request runs alone between them.
func (e *Engine) commit(batch []*request) {
	start := 0
	for i, r := range batch {
		if r.exclusive == nil {
			continue
		}
		e.commitGroup(batch[start:i], false)
		if r.err = e.Damaged(); r.err == nil {
			r.err = e.guard(func() error { return r.exclusive(e.db) })
		}
		if r.err == nil {
			e.acknowledge()
		}
		clear(e.cache)
		close(r.done)
		start = i + 1
	}
	e.commitGroup(batch[start:], true)
}

// join takes up to n ordinary requests from the head of the queue, for a
// transaction that has not committed yet.
func (e *Engine) join(n int) []*request {
	e.qmu.Lock()
	defer e.qmu.Unlock()
	k := 0
	for k < len(e.queue) && k < n && e.queue[k].exclusive == nil {
		k++
	}
	if k == 0 {
		return nil
	}
	more := e.queue[:k:k]
	e.queue = append([]*request(nil), e.queue[k:]...)
	return more
}

// commitGroup runs requests in one bbolt transaction. A request that
// fails validation is answered with its error and leaves no trace; a
// storage failure fails the whole batch. With late set, requests queued
// while the batch is being decided join it before the commit: the time
// spent deciding, not a timer or a yield, is what groups them.
func (e *Engine) commitGroup(batch []*request, late bool) {
	if len(batch) == 0 {
		return
	}
	if err := e.Damaged(); err != nil {
		for _, r := range batch {
			r.err = err
			close(r.done)
		}
		return
	}
	seq0, hash0 := e.lastSeq, e.lastHash
	w := &txWriter{e: e, pending: map[events.StreamID]aggregate.State{}}
	err := e.guard(func() error {
		return e.db.Update(func(tx *bolt.Tx) error {
			w.tx, w.ptx = tx, w.e.proj.In(tx)
			defer func() { w.tx, w.ptx = nil, nil }()
			for i := 0; i < len(batch); i++ {
				r := batch[i]
				res, err := w.process(r)
				if err != nil {
					var se *storageError
					if errors.As(err, &se) {
						return se.err
					}
					r.err = err
				} else {
					r.res = res
				}
				if late && i == len(batch)-1 && len(batch) < maxBatch {
					batch = append(batch, e.join(maxBatch-len(batch))...)
				}
			}
			if e.lastSeq != seq0 {
				if err := w.ptx.SetCheckpoint(e.lastSeq); err != nil {
					return err
				}
				if err := e.tendReserve(tx); err != nil {
					return err
				}
			}
			return nil
		})
	})
	e.lastBatch = len(batch) // joiners included
	if err == nil {
		e.acknowledge()
		e.commits.Add(1)
		e.committedReqs.Add(uint64(len(batch)))
		if len(e.cache)+len(w.pending) > maxCache {
			clear(e.cache)
		}
		for sid, st := range w.pending {
			e.cache[sid] = st
		}
	} else {
		e.lastSeq, e.lastHash = seq0, hash0
		e.log.Error("commit failed", "err", err)
		if ce := (*errs.Error)(nil); !errors.As(err, &ce) {
			err = errs.IO(err, "commit")
		}
		for _, r := range batch {
			if r.err == nil {
				r.res, r.err = Result{}, err
			}
		}
	}
	e.head.Store(e.lastSeq)
	for _, r := range batch {
		close(r.done)
	}
	if e.lastSeq != seq0 {
		e.notify()
	}
}

type storageError struct{ err error }

func (s *storageError) Error() string { return s.err.Error() }

type txWriter struct {
	e   *Engine
	tx  *bolt.Tx
	ptx ProjectionTx
	// pending holds the states written by this group's earlier requests;
	// they reach the cache only once the commit succeeds.
	pending map[events.StreamID]aggregate.State
}

// committed returns the latest state of a stream as of this transaction,
// without copying: callers must not modify it.
func (w *txWriter) committed(sid events.StreamID) (aggregate.State, error) {
	if s, ok := w.pending[sid]; ok {
		return s, nil
	}
	if s, ok := w.e.cache[sid]; ok {
		return s, nil
	}
	s, err := w.ptx.State(sid.Kind, sid.ID)
	if err == nil && s != nil {
		// Not written in this transaction, so the stored value is committed.
		w.e.cache[sid] = s
	}
	return s, err
}

// txView is the View a decider sees.
type txView struct {
	w   *txWriter
	now time.Time
	n   *int
}

func (v txView) NextSeq() uint64 { return v.w.e.lastSeq + 1 }

func (v txView) NewID() string {
	*v.n++
	return events.DeriveID(v.now, v.w.e.lastHash[:], binary.BigEndian.AppendUint64(nil, v.w.e.lastSeq+1),
		binary.BigEndian.AppendUint64(nil, uint64(*v.n)), []byte("aggregate")).String()
}

func (v txView) State(k events.Kind, id string) (aggregate.State, error) {
	s, err := v.w.committed(events.StreamID{Kind: k, ID: id})
	if s == nil || err != nil {
		return nil, err
	}
	return aggregate.Clone(s), nil
}

func (v txView) Lookup(idx, key string) []index.Ref  { return v.w.ptx.Lookup(idx, key) }
func (v txView) Scan(idx, prefix string) []index.Ref { return v.w.ptx.Scan(idx, prefix) }
func (v txView) DueBy(now time.Time) []index.Due     { return v.w.ptx.DueBy(now) }

type staged struct {
	old, cur aggregate.State
	version  uint64
}

func (w *txWriter) process(r *request) (Result, error) {
	if r.meta.CommandID != "" {
		if rng, ok := w.ptx.Command(r.meta.CommandID); ok {
			evs, err := readRange(w.tx, rng.First, rng.Last, r.meta.CommandID)
			if err != nil {
				return Result{}, err
			}
			return Result{Events: evs, Replayed: true, Outcome: Replayed}, nil
		}
	}
	now := r.now
	if now.IsZero() {
		now = w.e.clock.Now()
	}
	// The stored time is whole nanoseconds in UTC; use exactly that so the
	// live apply and a replay see the same value.
	now = time.Unix(0, now.UnixNano()).UTC()

	var dec Decision
	if r.decider != nil {
		var err error
		if dec, err = r.decider.Decide(txView{w: w, now: now, n: new(int)}, now); err != nil {
			return Result{}, err
		}
	} else {
		dec.Emits = r.emits
	}

	streams := map[events.StreamID]*staged{}
	var order []events.StreamID
	envs := make([]events.Envelope, 0, len(dec.Emits))
	seq := w.e.lastSeq
	for i, em := range dec.Emits {
		st, ok := streams[em.Stream]
		if !ok {
			var err error
			st, err = w.load(em.Stream)
			if err != nil {
				return Result{}, err
			}
			if r.decider == nil && r.expected != AnyVersion && st.version != r.expected {
				return Result{}, errs.New(errs.ECONFLICT, "%s: expected version %d, stream is at %d", em.Stream, r.expected, st.version)
			}
			streams[em.Stream] = st
			order = append(order, em.Stream)
		}
		var enc encoded
		if r.enc != nil {
			enc = r.enc[i]
		} else {
			var err error
			if enc, err = encode(em); err != nil {
				return Result{}, err
			}
		}
		seq++
		id := events.DeriveID(now, w.e.lastHash[:], binary.BigEndian.AppendUint64(nil, seq), []byte("event"))
		env := events.Envelope{
			Seq: seq, ID: id, Stream: em.Stream, Version: st.version + 1,
			Type: em.Payload.EventType(), Schema: enc.schema,
			RecordedAt: now, Actor: r.meta.Actor, CommandID: r.meta.CommandID,
			CorrelationID: r.meta.CorrelationID, Payload: enc.raw,
		}
		var err error
		if st.cur, err = aggregate.Apply(w.e.ms, st.cur, &env, enc.payload); err != nil {
			return Result{}, err
		}
		st.version++
		envs = append(envs, env)
	}

	// Everything validated; write.
	if err := w.chain(envs); err != nil {
		return Result{}, &storageError{err}
	}
	for _, sid := range order {
		st := streams[sid]
		if err := w.ptx.Put(st.old, st.cur); err != nil {
			return Result{}, &storageError{err}
		}
		w.pending[sid] = st.cur
	}
	return Result{Events: envs, Outcome: dec.Outcome, value: dec.value}, nil
}

func (w *txWriter) load(sid events.StreamID) (*staged, error) {
	old, err := w.committed(sid)
	if err != nil {
		return nil, err
	}
	st := &staged{old: old}
	if old != nil {
		st.cur = aggregate.Clone(old)
		st.version = old.Head().Version
	}
	return st, nil
}
