// Package engine is cbth's event-sourced core: the append-only log on bbolt,
// its hash chain, a single writer at a time that group-commits whatever is
// queued, pure command handling (decide, then apply through the state
// machines) and the projections updated in the same transaction as each
// append.
//
// Append and Execute return only after the bbolt commit that holds their
// events has been fsynced.
//
// The files follow the layers: engine.go opens, guards and closes the
// file; log.go is the log (appends, the hash chain, the records);
// writer.go the writer (commands and decisions, the queue, the group
// commit); read.go the reader (reads of the log, the views, the
// subscriptions) and states.go its typed getters; replay.go, asof.go,
// integrity.go and export.go rebuild, read the past, verify and export.
package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	bolt "go.etcd.io/bbolt"
)

// Options configure Open.
type Options struct {
	// Projections are the read models kept beside the log (package
	// projections: projections.Store{}). Required.
	Projections Projections
	// Clock stamps every decided event. Defaults to SystemClock.
	Clock Clock
	// LockTimeout bounds the wait for bbolt's exclusive file lock.
	// Defaults to one second.
	LockTimeout time.Duration
	// Logger receives diagnostics. Defaults to a discarding logger.
	Logger *slog.Logger
	// NoSync disables fsync. Only benchmarks that measure the engine's own
	// overhead set it; it voids durability.
	NoSync bool
}

// Engine owns one bbolt log file. It is safe for concurrent use.
type Engine struct {
	db   *bolt.DB
	path string
	ack  *ackWriter
	// damage is set by the first panic caught inside bbolt.
	damage atomic.Pointer[error]
	clock  Clock
	log    *slog.Logger
	ms     *fsm.Machines
	proj   Projections
	once   sync.Once

	// The queue of requests and its leader. There is no writer goroutine:
	// the first submitter to find no leader becomes it and commits what is
	// queued, batch after batch, until the queue is empty. One writer at a
	// time, and an uncontended append costs no hand-off between goroutines.
	qmu      sync.Mutex
	queue    []*request
	leading  bool
	isClosed bool
	leaders  sync.WaitGroup

	head atomic.Uint64 // last committed seq, for readers

	commits, committedReqs atomic.Uint64 // for Stats

	// Owned by the current leader.
	lastSeq   uint64
	lastHash  events.Hash
	lastBatch int                                 // requests in the last batch taken
	filler    []byte                              // the reserve's zeros, kept between reserves
	cache     map[events.StreamID]aggregate.State // committed states only

	subMu sync.Mutex
	subs  map[*Subscription]struct{}
}

// Open opens the log at path, with mode 0600, creating it only where no
// log has been before (see AckPath). It refuses, with ECORRUPT, a log
// that is missing or empty where one was, one that bbolt cannot read, one
// whose head is older than the last acknowledged commit or has another
// hash, and one whose projections are ahead of it: each means committed
// events are gone, and opening would build on what is left.
func Open(path string, opt Options) (*Engine, error) {
	if opt.Projections == nil {
		return nil, errs.New(errs.EINTERNAL, "open %s: no projections", path)
	}
	if opt.Clock == nil {
		opt.Clock = SystemClock{}
	}
	if opt.LockTimeout == 0 {
		opt.LockTimeout = time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	ack, slot, hasAck, err := ReadAck(path)
	if err != nil {
		return nil, err
	}
	switch fi, err := os.Stat(path); {
	case err == nil && fi.Size() > 0:
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if hasAck {
			what := "missing"
			if err == nil {
				what = "empty (0 bytes)"
			}
			return nil, errs.New(errs.ECORRUPT, "the log %s is %s, but a log was here: %s records seq %d as acknowledged", path, what, AckPath(path), ack.Seq)
		}
	default:
		return nil, errs.Wrap(errs.EACCES, err, "stat %s", path)
	}
	var db *bolt.DB
	if p := catch(func() { db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: opt.LockTimeout, NoSync: opt.NoSync}) }); p != nil {
		return nil, damaged(path, p)
	}
	if err != nil {
		return nil, openError(path, err)
	}
	e := &Engine{
		db: db, path: path, clock: opt.Clock, log: opt.Logger, ms: fsm.New(), proj: opt.Projections,
		subs: make(map[*Subscription]struct{}), cache: make(map[events.StreamID]aggregate.State),
	}
	if err := e.open(ack, slot, hasAck); err != nil {
		db.Close()
		return nil, err
	}
	e.head.Store(e.lastSeq)
	return e, nil
}

// open reads the head and checks it before anything is written: a write
// transaction would replace the newer meta page that a rollback check
// needs.
func (e *Engine) open(ack Ack, slot int, hasAck bool) error {
	var checkpoint uint64
	var atAck events.Hash
	var ackFound, complete bool
	err := e.guard(func() error {
		return e.db.View(func(tx *bolt.Tx) error {
			complete = tx.Bucket(bucketLog) != nil
			for _, b := range e.proj.Buckets() {
				complete = complete && tx.Bucket(b) != nil
			}
			if b := tx.Bucket(bucketLog); b != nil {
				k, v := b.Cursor().Last()
				if k != nil {
					e.lastSeq = binary.BigEndian.Uint64(k)
					h, ok := events.HashOf(v)
					if !ok {
						return errs.New(errs.ECORRUPT, "%s: log tail record %d is truncated", e.path, e.lastSeq)
					}
					e.lastHash = h
				}
				if ack.Seq > 0 {
					atAck, ackFound = events.HashOf(b.Get(binary.BigEndian.AppendUint64(nil, ack.Seq)))
				}
			}
			if complete {
				checkpoint = e.proj.In(tx).Checkpoint()
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	switch {
	case hasAck && ack.Seq > e.lastSeq:
		return errs.New(errs.ECORRUPT, "%s ends at seq %d, but seq %d was acknowledged (%s): committed transactions are gone (a rolled-back meta page or a truncated file)", e.path, e.lastSeq, ack.Seq, AckPath(e.path))
	case hasAck && ack.Seq > 0 && (!ackFound || atAck != ack.Hash):
		return errs.New(errs.ECORRUPT, "%s: the record at seq %d is not the one acknowledged (%s): this is not the log that was written here", e.path, ack.Seq, AckPath(e.path))
	case checkpoint > e.lastSeq:
		return errs.New(errs.ECORRUPT, "%s ends at seq %d, but its projections were built up to seq %d: events are gone from the log", e.path, e.lastSeq, checkpoint)
	}
	if !complete {
		err := e.guard(func() error {
			return e.db.Update(func(tx *bolt.Tx) error {
				if _, err := tx.CreateBucketIfNotExists(bucketLog); err != nil {
					return err
				}
				return e.proj.Create(tx)
			})
		})
		if err != nil {
			return errs.IO(err, "initialise %s", e.path)
		}
	}
	head := Ack{Seq: e.lastSeq, Hash: e.lastHash}
	if !hasAck {
		e.ack, err = createAck(e.path, head)
		return err
	}
	if e.ack, err = openAck(e.path, slot, ack); err != nil {
		return err
	}
	if ack.Seq < head.Seq {
		return e.ack.write(head)
	}
	return nil
}

// guard runs fn inside the recover boundary (see catch). A panic marks
// the engine damaged: the file is checked, and the error says what the
// check found (ECORRUPT) or, when it finds nothing, that this is a bug
// (EINTERNAL). No commit is attempted after it.
func (e *Engine) guard(fn func() error) error {
	var err error
	p := catch(func() { err = fn() })
	if p == nil {
		return err
	}
	e.log.Error("panic inside bbolt", "path", e.path, "panic", p, "stack", string(debug.Stack()))
	probs := checkStructure(e.db, func() (*bolt.Tx, error) { return e.db.Begin(false) })
	if len(probs) == 0 {
		err = &errs.Error{Code: errs.EINTERNAL, Message: fmt.Sprintf("%s: bbolt panicked (%v), but the file passes bbolt's consistency check: a bug", e.path, p)}
	} else {
		err = &errs.Error{Code: errs.ECORRUPT, Message: fmt.Sprintf("%s is damaged: bbolt panicked (%v); %s", e.path, p, summarize(probs))}
	}
	e.damage.CompareAndSwap(nil, &err)
	return err
}

// summarize joins the first few problems of a check.
func summarize(probs []string) string {
	const show = 3
	s := ""
	for i, p := range probs[:min(show, len(probs))] {
		if i > 0 {
			s += "; "
		}
		s += p
	}
	if len(probs) > show {
		s += fmt.Sprintf(" (and %d more)", len(probs)-show)
	}
	return s
}

// Damaged returns the error that marked the engine damaged, or nil. A
// damaged engine commits nothing more.
func (e *Engine) Damaged() error {
	if p := e.damage.Load(); p != nil {
		return *p
	}
	return nil
}

// DB exposes the underlying bbolt handle for read-only inspection (tests,
// verification tools). Writing through it bypasses the log.
func (e *Engine) DB() *bolt.DB { return e.db }

// Close stops the writer after the requests already queued and closes the
// file.
func (e *Engine) Close() error {
	var err error
	e.once.Do(func() {
		e.qmu.Lock()
		e.isClosed = true
		e.qmu.Unlock()
		e.leaders.Wait() // a leader finishes what was queued before Close
		e.subMu.Lock()
		for s := range e.subs {
			close(s.c)
			delete(e.subs, s)
		}
		e.subMu.Unlock()
		err = e.db.Close()
		if aerr := e.ack.close(); err == nil {
			err = aerr
		}
	})
	return err
}

// Stats counts the engine's work since Open.
type Stats struct {
	Commits  uint64 // write transactions that committed
	Requests uint64 // requests answered by those commits
}

// Stats returns the counters; Requests/Commits is the mean group size.
func (e *Engine) Stats() Stats {
	return Stats{Commits: e.commits.Load(), Requests: e.committedReqs.Load()}
}

// Head returns the last committed sequence number.
func (e *Engine) Head() uint64 { return e.head.Load() }

// Now reads the engine's clock.
func (e *Engine) Now() time.Time { return e.clock.Now() }
