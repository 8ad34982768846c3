package engine

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	bolt "go.etcd.io/bbolt"
)

// ErrStop ends a read early without error.
var ErrStop = errors.New("stop reading")

// ReadFrom calls fn for every event with seq >= from, in order, checking
// each record's hash. Returning ErrStop from fn ends the walk cleanly.
func (e *Engine) ReadFrom(from uint64, fn func(events.Envelope) error) error {
	return e.guard(func() error { return e.db.View(func(tx *bolt.Tx) error { return walkLog(tx, from, fn) }) })
}

// walkLog decodes records from seq from on, checking each hash; ErrStop
// from fn ends the walk cleanly.
func walkLog(tx *bolt.Tx, from uint64, fn func(events.Envelope) error) error {
	b := tx.Bucket(bucketLog)
	if b == nil {
		return nil
	}
	c := b.Cursor()
	for k, v := c.Seek(binary.BigEndian.AppendUint64(nil, from)); k != nil; k, v = c.Next() {
		env, err := events.Decode(v)
		if err != nil {
			return errs.Wrap(errs.ECORRUPT, err, "seq %d", binary.BigEndian.Uint64(k))
		}
		if err := fn(env); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
	return nil
}

// ReadStream calls fn for every event of one stream, in version order,
// found through the per-stream index (see ReadStreamUntil).
func (e *Engine) ReadStream(sid events.StreamID, fn func(events.Envelope) error) error {
	return e.ReadStreamUntil(sid, 0, fn)
}

// View runs fn against a consistent read-only view of the projections.
func (e *Engine) View(fn func(v ProjectionTx) error) error {
	return e.guard(func() error { return e.db.View(func(tx *bolt.Tx) error { return fn(e.proj.In(tx)) }) })
}

// Subscription signals that the log head moved. Signals coalesce: a slow
// subscriber sees one pending signal, never an unbounded queue, and reads
// what it missed from the log.
type Subscription struct {
	e *Engine
	c chan struct{}
}

// C receives a value after each commit that appended events. It is closed
// when the engine closes.
func (s *Subscription) C() <-chan struct{} { return s.c }

// Close stops the subscription.
func (s *Subscription) Close() {
	s.e.subMu.Lock()
	defer s.e.subMu.Unlock()
	if _, ok := s.e.subs[s]; ok {
		delete(s.e.subs, s)
		close(s.c)
	}
}

// Subscribe returns a subscription to commits.
func (e *Engine) Subscribe() *Subscription {
	s := &Subscription{e: e, c: make(chan struct{}, 1)}
	e.subMu.Lock()
	e.subs[s] = struct{}{}
	e.subMu.Unlock()
	return s
}

func (e *Engine) notify() {
	e.subMu.Lock()
	defer e.subMu.Unlock()
	for s := range e.subs {
		select {
		case s.c <- struct{}{}:
		default:
		}
	}
}

// Snapshot is a consistent read-only view of the projections for read
// queries (engine/query): a Reader plus walks over a whole kind, the
// counters, the checkpoint and the deadline index. Adapters read through
// it and never see the storage.
type Snapshot interface {
	Reader
	ForEach(k events.Kind, fn func(aggregate.State) error) error
	ForEachAfter(k events.Kind, after string, fn func(aggregate.State) error) error
	Count(name string) uint64
	Checkpoint() uint64
	NextDue() (index.Due, bool)
	NextDueAfter(t time.Time) (index.Due, bool)
}

// ProjectionsCurrent reports whether the stored projections are of the
// current version and caught up with the log; when not, Rebuild brings
// them up to date.
func (e *Engine) ProjectionsCurrent() (bool, error) {
	ok := false
	err := e.View(func(v ProjectionTx) error {
		ok = v.Version() == e.proj.Version() && v.Checkpoint() == e.Head()
		return nil
	})
	return ok, err
}

// Read runs fn against a consistent snapshot of the projections.
func (e *Engine) Read(fn func(s Snapshot) error) error {
	return e.db.View(func(tx *bolt.Tx) error { return fn(e.proj.In(tx)) })
}

// ReadLogFile walks the log of a bbolt file that no daemon holds, opened
// read-only (a shared lock, waiting at most timeout), checking each
// record's hash. It never writes, so auditing a home cannot change it.
func ReadLogFile(path string, timeout time.Duration, from uint64, fn func(events.Envelope) error) error {
	db, err := openReadOnly(path, timeout)
	if err != nil {
		return err
	}
	defer db.Close()
	if p := catch(func() { err = db.View(func(tx *bolt.Tx) error { return walkLog(tx, from, fn) }) }); p != nil {
		return damaged(path, p)
	}
	return err
}

// openReadOnly opens a bbolt file with a shared lock, waiting at most
// timeout, inside the recover boundary.
func openReadOnly(path string, timeout time.Duration) (*bolt.DB, error) {
	var db *bolt.DB
	var err error
	// PreLoadFreelist reads the freelist here, inside the boundary, rather
	// than in bbolt's consistency check, on a goroutine of its own.
	if p := catch(func() {
		db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: timeout, PreLoadFreelist: true})
	}); p != nil {
		return nil, damaged(path, p)
	}
	if err != nil {
		return nil, openError(path, err)
	}
	return db, nil
}

// LogFileHead returns the last seq of the log of a bbolt file that no
// daemon holds, opened read-only. A damaged file is ECORRUPT, never a
// fault that ends the process: the file is opened and read inside the
// same recover boundary as the verifier's.
func LogFileHead(path string, timeout time.Duration) (uint64, error) {
	db, err := openReadOnly(path, timeout)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var head uint64
	if p := catch(func() {
		err = db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket(bucketLog); b != nil {
				if k, _ := b.Cursor().Last(); k != nil {
					head = binary.BigEndian.Uint64(k)
				}
			}
			return nil
		})
	}); p != nil {
		return 0, damaged(path, p)
	}
	return head, err
}

// CommandSeen reports whether an idempotency key (Meta.CommandID) is in
// the log: a caller that must not act twice checks before it acts.
func (e *Engine) CommandSeen(id string) (bool, error) {
	var seen bool
	err := e.View(func(v ProjectionTx) error {
		_, seen = v.Command(id)
		return nil
	})
	return seen, err
}

// Reader is what a decision reads: aggregate states and the indexes
// derived from them. Read-side helpers of the commands (eligibility, the
// fair order) take a Reader, so they run inside the writer and outside it
// alike.
type Reader interface {
	State(k events.Kind, id string) (aggregate.State, error)
	Lookup(index, key string) []index.Ref
	Scan(index, prefix string) []index.Ref
	DueBy(now time.Time) []index.Due
}

// View is what a command may read while deciding: committed state plus the
// effects of requests committed earlier in the same group commit.
type View interface {
	Reader
	// NewID returns a fresh UUIDv7 for a new aggregate, derived from the
	// log head and the decision time, so a replayed command script yields
	// the same ids.
	NewID() string
	// NextSeq is the seq the next appended event will get.
	NextSeq() uint64
}
