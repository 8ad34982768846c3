// Package projections holds cbth's read models: views of the event log
// that are rebuilt from it alone and never hold anything it does not.
//
// This package is the read models in bbolt, beside the log: the current
// state of every aggregate, secondary indexes, the deadline index and
// the command (idempotency) index, the per-stream index, plus a
// checkpoint (Store, the engine's Projections). The engine updates them
// in the same transaction as each append; Rebuild drops them and derives
// them again from the log alone. The file projections are its
// subpackages: desktop (the Desktop inbox: snapshot manifests and their
// per-revision files) and ctxsession (CortexFS session directories and
// their session/index/). Each decides what its files hold; the adapters
// write them where they are told (paths, modes, fsync, atomic rename).
//
// Projections import the engine, never the reverse (spec/engine.md,
// "Layers").
package projections

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	bolt "go.etcd.io/bbolt"
)

// Store is the read models in bbolt as the engine uses them
// (engine.Projections): hand it to engine.Open.
type Store struct{}

var _ engine.Projections = Store{}

// Version implements engine.Projections.
func (Store) Version() uint64 { return Version }

// Buckets implements engine.Projections.
func (Store) Buckets() [][]byte { return Buckets() }

// Create implements engine.Projections.
func (Store) Create(tx *bolt.Tx) error { return Create(tx) }

// In implements engine.Projections.
func (Store) In(tx *bolt.Tx) engine.ProjectionTx { return Wrap(tx) }

// ImageOf implements engine.Projections.
func (Store) ImageOf(states []aggregate.State, commands map[string]engine.CommandRange, streams map[events.StreamID][]uint64, checkpoint uint64) (engine.Image, error) {
	return ImageOf(states, commands, streams, checkpoint)
}

// ReadImage implements engine.Projections.
func (Store) ReadImage(tx *bolt.Tx) (engine.Image, error) { return ReadImage(tx) }

// WriteImage implements engine.Projections.
func (Store) WriteImage(tx *bolt.Tx, img engine.Image) error { return WriteImage(tx, img) }

// WriteImageChunked implements engine.Projections.
func (Store) WriteImageChunked(db *bolt.DB, img engine.Image, chunk int) error {
	return WriteImageChunked(db, img, chunk)
}

// Bucket names. Every bucket listed in Buckets is derived and may be
// dropped and rebuilt at any time.
var (
	bucketIndex     = []byte("p.index")
	bucketDeadlines = []byte("p.deadlines")
	bucketCommands  = []byte("p.commands")
	bucketMeta      = []byte("p.meta")
	// bucketStreams is the per-stream index of the log: kind \0 id \0
	// seq (8 bytes, big-endian) -> nothing, so one aggregate's events,
	// or those up to a seq, are found without walking the log (the
	// operator's time machine: spec/engine.md, "Reading the past").
	bucketStreams = []byte("p.streams")
	// keyCheckpoint names the checkpoint in an Image. It is stored as the
	// sequence of the empty p.meta bucket: that lives in the root page,
	// which every commit rewrites anyway, so it costs no extra page.
	keyCheckpoint = []byte("checkpoint")
	// keyVersion holds Version in p.meta.
	keyVersion = []byte("version")
)

// Version numbers what the states derive (index entries, deadline kinds,
// counters). It changes whenever a state's derivation does, so a daemon
// finding projections of another version rebuilds them from the log: a
// log is never rewritten, its projections always may be. Projections
// without a version key are version 1.
//
//	2: jobs indexed by thread; attempts tracking a turn indexed; the
//	   deadline index holds only work the sweep does (scheduler wake-ups
//	   left it); running jobs have a job.timeout deadline.
//	3: Desktop bindings indexed by caller automation and, while armed
//	   and not quiesced, by pause_not_before.
//	4: ctx session directories keyed by their tree root first, so the
//	   sessions of two CortexFS trees never share a key.
//	5: ctx sessions count the bytes of their messages.jsonl and
//	   events.jsonl.
//	6: the per-stream index of the log (p.streams), and every batch,
//	   closed ones too, indexed by its thread and opening seq
//	   (batch.thread).
const Version = 6

// countKey names a counter in p.meta. The bucket stays small enough to be
// stored inline in the root page, which every commit rewrites anyway.
func countKey(name string) []byte { return []byte("count\x00" + name) }

func stateBucket(k events.Kind) []byte { return []byte("p.state." + string(k)) }

// Buckets lists every projection bucket name.
func Buckets() [][]byte {
	out := [][]byte{bucketIndex, bucketDeadlines, bucketCommands, bucketMeta, bucketStreams}
	for _, k := range events.Kinds {
		out = append(out, stateBucket(k))
	}
	return out
}

// Tx is a view of the projections inside one bbolt transaction.
type Tx struct {
	tx *bolt.Tx
}

// Wrap returns the projection view of tx.
func Wrap(tx *bolt.Tx) *Tx { return &Tx{tx: tx} }

// Create makes sure every bucket exists. tx must be writable. Projections
// it creates from nothing are of the current Version.
func Create(tx *bolt.Tx) error {
	fresh := tx.Bucket(bucketMeta) == nil
	for _, b := range Buckets() {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return fmt.Errorf("create bucket %s: %w", b, err)
		}
	}
	if fresh {
		return tx.Bucket(bucketMeta).Put(keyVersion, binary.BigEndian.AppendUint64(nil, Version))
	}
	return nil
}

// Version returns the version of the stored projections.
func (t *Tx) Version() uint64 {
	v := t.tx.Bucket(bucketMeta).Get(keyVersion)
	if len(v) != 8 {
		return 1
	}
	return binary.BigEndian.Uint64(v)
}

// Drop deletes every projection bucket and creates them empty.
func Drop(tx *bolt.Tx) error {
	for _, b := range Buckets() {
		if tx.Bucket(b) != nil {
			if err := tx.DeleteBucket(b); err != nil {
				return fmt.Errorf("drop bucket %s: %w", b, err)
			}
		}
	}
	return Create(tx)
}

// State returns the current state of an aggregate, or nil if it does not
// exist.
func (t *Tx) State(k events.Kind, id string) (aggregate.State, error) {
	b := t.tx.Bucket(stateBucket(k))
	if b == nil {
		return nil, nil
	}
	v := b.Get([]byte(id))
	if v == nil {
		return nil, nil
	}
	return aggregate.Decode(k, v)
}

// ForEach calls fn for every aggregate of kind k in id order.
func (t *Tx) ForEach(k events.Kind, fn func(aggregate.State) error) error {
	b := t.tx.Bucket(stateBucket(k))
	if b == nil {
		return nil
	}
	return b.ForEach(func(_, v []byte) error {
		s, err := aggregate.Decode(k, v)
		if err != nil {
			return err
		}
		return fn(s)
	})
}

// ForEachAfter calls fn for every aggregate of kind k whose id sorts after
// after, in id order, until fn returns an error.
func (t *Tx) ForEachAfter(k events.Kind, after string, fn func(aggregate.State) error) error {
	b := t.tx.Bucket(stateBucket(k))
	if b == nil {
		return nil
	}
	c := b.Cursor()
	key, v := c.First()
	if after != "" {
		key, v = c.Seek([]byte(after))
		if key != nil && string(key) == after {
			key, v = c.Next()
		}
	}
	for ; key != nil; key, v = c.Next() {
		s, err := aggregate.Decode(k, v)
		if err != nil {
			return err
		}
		if err := fn(s); err != nil {
			return err
		}
	}
	return nil
}

// Put stores s, replacing old (nil when s is new), and moves its index and
// deadline entries from old's to s's.
func (t *Tx) Put(old, s aggregate.State) error {
	k := aggregate.KindOf(s)
	id := s.Head().ID
	v, err := aggregate.Encode(s)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "encode %s/%s", k, id)
	}
	b := t.tx.Bucket(stateBucket(k))
	// Ids are mostly UUIDv7s, ordered by time, so new states land in the
	// last leaf: fuller leaves than bbolt's default half mean fewer splits
	// and a smaller tree. The tenth left free absorbs states that grow in
	// place.
	b.FillPercent = 0.9
	if err := b.Put([]byte(id), v); err != nil {
		return err
	}
	return t.moveDerived(k, id, old, s)
}

func (t *Tx) moveDerived(k events.Kind, id string, old, s aggregate.State) error {
	if err := t.diffPut(bucketIndex, indexKeys(k, id, old), indexKeys(k, id, s)); err != nil {
		return err
	}
	if err := t.diffPut(bucketDeadlines, deadlineKeys(k, id, old), deadlineKeys(k, id, s)); err != nil {
		return err
	}
	return t.moveCounts(counts(old), counts(s))
}

func counts(s aggregate.State) []string {
	if c, ok := s.(aggregate.Counter); ok && s != nil {
		return c.Counts()
	}
	return nil
}

// moveCounts takes one from each counter in old but not in new and adds
// one to each in new but not in old. A counter at zero has no key, as in
// a rebuild.
func (t *Tx) moveCounts(old, new []string) error {
	for _, o := range old {
		if !slices.Contains(new, o) {
			if err := t.addCount(o, -1); err != nil {
				return err
			}
		}
	}
	for _, n := range new {
		if !slices.Contains(old, n) {
			if err := t.addCount(n, 1); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *Tx) addCount(name string, delta int64) error {
	b := t.tx.Bucket(bucketMeta)
	k := countKey(name)
	n := int64(t.Count(name)) + delta
	if n < 0 {
		return errs.New(errs.ECORRUPT, "counter %s would go below zero", name)
	}
	if n == 0 {
		return b.Delete(k)
	}
	return b.Put(k, binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// Count returns the named counter (see aggregate.Counter).
func (t *Tx) Count(name string) uint64 {
	v := t.tx.Bucket(bucketMeta).Get(countKey(name))
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// diffPut deletes keys in old but not in new and puts keys in new but not
// in old, so an unchanged entry costs no write. The bucket is not even
// opened when both lists are empty, as they are for most states: opening
// one costs an allocation and a map entry in every commit.
func (t *Tx) diffPut(name []byte, old, new [][]byte) error {
	if len(old) == 0 && len(new) == 0 {
		return nil
	}
	b := t.tx.Bucket(name)
	for _, o := range old {
		if !slices.ContainsFunc(new, func(n []byte) bool { return bytes.Equal(n, o) }) {
			if err := b.Delete(o); err != nil {
				return err
			}
		}
	}
	for _, n := range new {
		if !slices.ContainsFunc(old, func(o []byte) bool { return bytes.Equal(o, n) }) {
			if err := b.Put(n, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// indexKeys are a state's index entries as stored (index.EntryKey).
func indexKeys(k events.Kind, id string, s aggregate.State) [][]byte {
	ix, ok := s.(aggregate.Indexer)
	if !ok || s == nil {
		return nil
	}
	var out [][]byte
	for _, e := range ix.Indexes() {
		out = append(out, []byte(index.EntryKey(e.Index, index.Ref{Key: e.Key, Kind: k, ID: id})))
	}
	return out
}

// deadlineKeys are a state's deadlines as stored (index.DueKey), so a
// cursor walks them in due order.
func deadlineKeys(k events.Kind, id string, s aggregate.State) [][]byte {
	dl, ok := s.(aggregate.Deadliner)
	if !ok || s == nil {
		return nil
	}
	var out [][]byte
	for _, d := range dl.Deadlines() {
		if d.At.IsZero() {
			continue
		}
		out = append(out, []byte(index.DueKey(index.Due{At: d.At, Kind: k, ID: id, Name: d.Name})))
	}
	return out
}

// Lookup returns the aggregates whose entries in idx have exactly key.
func (t *Tx) Lookup(idx, key string) []index.Ref {
	return t.scan(index.EntryPrefix(idx, key+"\x00"))
}

// Scan returns the entries of idx whose key starts with prefix, in key
// order.
func (t *Tx) Scan(idx, prefix string) []index.Ref {
	return t.scan(index.EntryPrefix(idx, prefix))
}

func (t *Tx) scan(prefix string) []index.Ref {
	var out []index.Ref
	c := t.tx.Bucket(bucketIndex).Cursor()
	p := []byte(prefix)
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		if r, ok := index.ParseEntryKey(string(k)); ok {
			out = append(out, r)
		}
	}
	return out
}

// DueBy returns every deadline at or before now, in due order, then kind,
// id and name order. It reads only the due entries: O(due), not O(all).
func (t *Tx) DueBy(now time.Time) []index.Due {
	var out []index.Due
	c := t.tx.Bucket(bucketDeadlines).Cursor()
	limit := uint64(now.UnixNano())
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		at := binary.BigEndian.Uint64(k[:8])
		if at > limit {
			break
		}
		if d, ok := parseDue(k); ok {
			out = append(out, d)
		}
	}
	return out
}

// NextDue returns the earliest deadline, if any.
func (t *Tx) NextDue() (index.Due, bool) {
	k, _ := t.tx.Bucket(bucketDeadlines).Cursor().First()
	return parseDue(k)
}

// NextDueAfter returns the earliest deadline strictly after at, if any:
// one seek, however many deadlines lie before it.
func (t *Tx) NextDueAfter(at time.Time) (index.Due, bool) {
	from := uint64(at.UnixNano()) + 1
	k, _ := t.tx.Bucket(bucketDeadlines).Cursor().Seek(binary.BigEndian.AppendUint64(nil, from))
	return parseDue(k)
}

func parseDue(k []byte) (index.Due, bool) { return index.ParseDueKey(string(k)) }

// Command returns the log range an idempotency key produced, if any.
func (t *Tx) Command(id string) (engine.CommandRange, bool) {
	v := t.tx.Bucket(bucketCommands).Get([]byte(id))
	if len(v) != 16 {
		return engine.CommandRange{}, false
	}
	return engine.CommandRange{First: binary.BigEndian.Uint64(v), Last: binary.BigEndian.Uint64(v[8:])}, true
}

// PutCommand records (or extends) the log range of an idempotency key.
func (t *Tx) PutCommand(id string, seq uint64) error {
	r, ok := t.Command(id)
	if !ok {
		r.First = seq
	}
	r.Last = seq
	v := binary.BigEndian.AppendUint64(nil, r.First)
	v = binary.BigEndian.AppendUint64(v, r.Last)
	return t.tx.Bucket(bucketCommands).Put([]byte(id), v)
}

// StreamKey is a stream's entry for seq in the per-stream index.
func StreamKey(sid events.StreamID, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(streamPrefix(sid), seq)
}

func streamPrefix(sid events.StreamID) []byte { return append(sid.Key(), 0) }

// PutStreamSeq records that the event at seq belongs to sid.
func (t *Tx) PutStreamSeq(sid events.StreamID, seq uint64) error {
	b := t.tx.Bucket(bucketStreams)
	// A stream's seqs only grow, and new streams mostly sort last
	// (time-ordered ids): fuller leaves, as for the states.
	b.FillPercent = 0.9
	return b.Put(StreamKey(sid, seq), nil)
}

// StreamSeqs calls fn with the seq of every event of sid up to and
// including until (0: all), in log order, until fn returns false.
func (t *Tx) StreamSeqs(sid events.StreamID, until uint64, fn func(seq uint64) bool) {
	p := streamPrefix(sid)
	c := t.tx.Bucket(bucketStreams).Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		if len(k) != len(p)+8 {
			continue // an id that extends this one after a NUL
		}
		seq := binary.BigEndian.Uint64(k[len(p):])
		if until > 0 && seq > until {
			return
		}
		if !fn(seq) {
			return
		}
	}
}

// Checkpoint returns the last log seq applied to the projections.
func (t *Tx) Checkpoint() uint64 {
	return t.tx.Bucket(bucketMeta).Sequence()
}

// SetCheckpoint records the last applied seq.
func (t *Tx) SetCheckpoint(seq uint64) error {
	return t.tx.Bucket(bucketMeta).SetSequence(seq)
}
