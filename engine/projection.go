package engine

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
	bolt "go.etcd.io/bbolt"
)

// Projections are the read models kept in the log's bbolt file beside
// it: every aggregate's current state, the indexes and the deadline
// index its state derives, the idempotency keys, the per-stream index
// and a checkpoint. The engine updates them in the transaction of each
// append, drops them and writes a replay's image in Rebuild, and
// compares them with a replay in Verify; what they hold, and in which
// buckets, is theirs to decide.
//
// Package projections implements it. It reads the engine's states, so it
// sits above the engine (spec/engine.md, "Layers"), and the engine names
// here only what it asks of it; whoever opens an engine hands it one
// (Options.Projections).
type Projections interface {
	// Version numbers what the read models derive. Stored read models of
	// another version are rebuilt (ProjectionsCurrent).
	Version() uint64
	// Buckets names every bucket the read models own; each may be
	// dropped and rebuilt from the log at any time.
	Buckets() [][]byte
	// Create makes the buckets that are missing; read models made from
	// nothing are of the current Version. tx is writable.
	Create(tx *bolt.Tx) error
	// In is the read models inside one transaction.
	In(tx *bolt.Tx) ProjectionTx
	// ImageOf is the content of every bucket that replayed states give,
	// with the idempotency keys and per-stream seqs seen in the log and
	// the last seq applied.
	ImageOf(states []aggregate.State, commands map[string]CommandRange, streams map[events.StreamID][]uint64, checkpoint uint64) (Image, error)
	// ReadImage copies the buckets out of tx.
	ReadImage(tx *bolt.Tx) (Image, error)
	// WriteImage replaces the buckets with img in one transaction.
	WriteImage(tx *bolt.Tx, img Image) error
	// WriteImageChunked replaces them in transactions of at most chunk
	// keys; until the last one commits they are of no current version,
	// so an interrupted write is rebuilt again.
	WriteImageChunked(db *bolt.DB, img Image, chunk int) error
}

// ProjectionTx is the read models inside one bbolt transaction: what
// readers see (Snapshot) and what the writer records.
type ProjectionTx interface {
	Snapshot
	// Version is the version of the stored read models.
	Version() uint64
	// Put stores s, replacing old (nil when s is new), and moves what
	// old derived (index, deadline and counter entries) to what s does.
	Put(old, s aggregate.State) error
	// Command is the log range an idempotency key produced, if any.
	Command(id string) (CommandRange, bool)
	// PutCommand records (or extends) the log range of an idempotency key.
	PutCommand(id string, seq uint64) error
	// PutStreamSeq records that the event at seq belongs to sid.
	PutStreamSeq(sid events.StreamID, seq uint64) error
	// StreamSeqs calls fn with the seq of every event of sid up to and
	// including until (0: all), in log order, until fn returns false.
	StreamSeqs(sid events.StreamID, until uint64, fn func(seq uint64) bool)
	// SetCheckpoint records the last applied seq.
	SetCheckpoint(seq uint64) error
}

// CommandRange is the span of log sequence numbers a command appended.
type CommandRange struct {
	First, Last uint64
}

// Image is the full content of the read models' buckets: bucket name ->
// key -> value. Two images are equal exactly when the buckets hold the
// same bytes.
type Image map[string]map[string][]byte

// Diff describes how two images differ, one line per differing key (at
// most limit lines). An empty result means the images are byte-identical.
func Diff(a, b Image, limit int) []string {
	var out []string
	names := map[string]bool{}
	for n := range a {
		names[n] = true
	}
	for n := range b {
		names[n] = true
	}
	var sorted []string
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		am, bm := a[n], b[n]
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		var ks []string
		for k := range keys {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			av, aok := am[k]
			bv, bok := bm[k]
			switch {
			case aok && !bok:
				out = append(out, fmt.Sprintf("%s %q: only in first", n, k))
			case !aok && bok:
				out = append(out, fmt.Sprintf("%s %q: only in second", n, k))
			case !bytes.Equal(av, bv):
				out = append(out, fmt.Sprintf("%s %q: %s != %s", n, k, av, bv))
			}
			if len(out) >= limit {
				return out
			}
		}
	}
	return out
}
