package engine_test

import (
	"encoding/binary"
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/projections"
	bolt "go.etcd.io/bbolt"
)

var benchParts = flag.Bool("bench.parts", false, "run BenchmarkAppendParts (not in just bench: it measures engines whose read models are cut down)")

// BenchmarkAppendParts says where the 8-writer wait of BenchmarkAppend
// goes beyond the bare grouped update: the same load against engines
// that keep only the log, or the log and one part of the read models
// (the state values, the job.thread index entries, the counters, the
// per-stream index), each as p50_x_floor (median over interleaved rounds
// of the wait over the same round's bare group of 8) with its page writes
// per commit, and x_log_only, the wait over the same round's log-only
// engine's. The cut-down engines are measurements only: their read
// models do not match their logs. Run with -bench.parts.
func BenchmarkAppendParts(b *testing.B) {
	if !*benchParts {
		b.Skip("run with -args -bench.parts")
	}
	dir := b.TempDir()
	parts := []string{"all", "log only", "state values", "job.thread index", "counters", "per-stream index"}
	es := make([]*engine.Engine, len(parts))
	for i, p := range parts {
		var proj engine.Projections = projections.Store{}
		if p != "all" {
			proj = partStore{part: p}
		}
		es[i] = enginetest.Open(b, filepath.Join(dir, fmt.Sprintf("parts-%d.db", i)), engine.Options{Projections: proj})
	}
	slice := *benchDur / time.Duration(*benchRounds)
	ratios := make([][]float64, len(parts))
	overLog := make([][]float64, len(parts))
	writes := make([][]float64, len(parts))
	for range b.N {
		for range *benchRounds {
			g, err := enginetest.BareGroup(filepath.Join(dir, "bare-group.db"), slice/2, 8)
			if err != nil {
				b.Fatal(err)
			}
			p50s := make([]time.Duration, len(es))
			for i, e := range es {
				w0, c0 := enginetest.PageWrites(e.DB()), e.Stats().Commits
				r, err := enginetest.AppendLoad(e, 8, slice)
				if err != nil {
					b.Fatal(err)
				}
				p50s[i] = r.P50
				ratios[i] = append(ratios[i], float64(r.P50)/float64(g.P50))
				writes[i] = append(writes[i], float64(enginetest.PageWrites(e.DB())-w0)/float64(e.Stats().Commits-c0))
			}
			for i := range es {
				overLog[i] = append(overLog[i], float64(p50s[i])/float64(p50s[1]))
			}
		}
	}
	for i, p := range parts {
		b.Logf("%-17s p50_x_floor %.2f  x_log_only %.2f  writes/commit %.1f", p, median(ratios[i]), median(overLog[i]), median(writes[i]))
	}
}

// partStore is projections.Store writing one part of what Put and
// PutStreamSeq write, for the job submissions of AppendLoad.
type partStore struct {
	projections.Store
	part string
}

type partTx struct {
	*projections.Tx
	part string
	tx   *bolt.Tx
}

func (s partStore) In(tx *bolt.Tx) engine.ProjectionTx {
	return partTx{Tx: projections.Wrap(tx), part: s.part, tx: tx}
}

func (t partTx) Put(old, s aggregate.State) error {
	id := s.Head().ID
	switch t.part {
	case "state values":
		v, err := aggregate.Encode(s)
		if err != nil {
			return err
		}
		b := t.tx.Bucket([]byte("p.state." + string(aggregate.KindOf(s))))
		b.FillPercent = 0.9 // as projections.Tx.Put
		return b.Put([]byte(id), v)
	case "job.thread index":
		if j, ok := s.(*aggregate.Job); ok && old == nil {
			return t.tx.Bucket([]byte("p.index")).Put([]byte("job.thread\x00"+j.SourceThreadID+"\x00job\x00"+id), nil)
		}
	case "counters":
		if old == nil {
			b := t.tx.Bucket([]byte("p.meta"))
			k := []byte("count\x00job.active")
			n := uint64(0)
			if v := b.Get(k); len(v) == 8 {
				n = binary.BigEndian.Uint64(v)
			}
			return b.Put(k, binary.BigEndian.AppendUint64(nil, n+1))
		}
	}
	return nil
}

func (t partTx) PutStreamSeq(sid events.StreamID, seq uint64) error {
	if t.part == "per-stream index" {
		return t.Tx.PutStreamSeq(sid, seq)
	}
	return nil
}
