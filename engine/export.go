package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"io"

	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	bolt "go.etcd.io/bbolt"
)

// Export writes every event with seq >= from as one JSON object per line.
// The lines carry the hashes, so an exported log can be verified and
// diffed without the bbolt file.
func (e *Engine) Export(w io.Writer, from uint64, filter func(*events.Envelope) bool) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	err := e.ReadFrom(from, func(env events.Envelope) error {
		if filter != nil && !filter(&env) {
			return nil
		}
		return enc.Encode(&env)
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// ReadExport parses an exported log, checking every record's hash and the
// prev_hash chain as it goes.
func ReadExport(r io.Reader, fn func(events.Envelope) error) error {
	dec := json.NewDecoder(bufio.NewReader(r))
	var prev events.Hash
	for line := 1; ; line++ {
		var env events.Envelope
		if err := dec.Decode(&env); err == io.EOF {
			return nil
		} else if err != nil {
			return errs.Wrap(errs.EINVAL, err, "export line %d", line)
		}
		stored := env.Hash
		events.Encode(&env) // recomputes env.Hash
		if env.Hash != stored {
			return errs.New(errs.ECORRUPT, "export line %d (seq %d): hash mismatch", line, env.Seq)
		}
		if line > 1 && env.PrevHash != prev {
			return errs.New(errs.ECORRUPT, "export line %d (seq %d): prev_hash breaks the chain", line, env.Seq)
		}
		prev = env.Hash
		if err := fn(env); err != nil {
			return err
		}
	}
}

// Import loads an exported log into an empty engine, record for record
// (same seqs, ids and hashes), validating every transition, then builds
// the projections.
func (e *Engine) Import(ctx context.Context, r io.Reader) (RebuildStats, error) {
	var st RebuildStats
	err := e.exclusive(ctx, func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketLog).Cursor().First(); k != nil {
			return errs.New(errs.EEXIST, "import needs an empty log")
		}
		m := newMemory(e.ms)
		var want uint64 = 1
		err := ReadExport(r, func(env events.Envelope) error {
			if env.Seq != want {
				return errs.New(errs.ECORRUPT, "import: seq %d where %d was expected", env.Seq, want)
			}
			want++
			p, err := events.DecodePayload(&env)
			if err != nil {
				return err
			}
			d := decoded{key: env.Seq, env: env, p: p, hash: env.Hash}
			if err := m.apply(&d); err != nil {
				return err
			}
			w := &txWriter{e: e, tx: tx, ptx: e.proj.In(tx)}
			return w.putRaw(&env)
		})
		if err != nil {
			return err
		}
		img, err := m.image(e.proj)
		if err != nil {
			return err
		}
		st = RebuildStats{Events: m.count, Aggregates: len(m.states), Checkpoint: m.last}
		if err := e.proj.WriteImage(tx, img); err != nil {
			return err
		}
		e.lastSeq, e.lastHash = m.last, m.lastHash
		e.head.Store(m.last)
		return nil
	})
	return st, err
}
