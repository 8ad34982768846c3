package projections

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
	bolt "go.etcd.io/bbolt"
)

// ImageOf derives the projection image from replayed states, the command
// ranges seen in the log, the seqs of each stream's events and the last
// applied seq.
func ImageOf(states []aggregate.State, commands map[string]engine.CommandRange, streams map[events.StreamID][]uint64, checkpoint uint64) (engine.Image, error) {
	img := engine.Image{}
	for _, b := range Buckets() {
		img[string(b)] = map[string][]byte{}
	}
	// Encoding the states is most of the work: spread it over the cores.
	vals := make([][]byte, len(states))
	errc := make(chan error, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	per := (len(states) + cap(errc) - 1) / cap(errc)
	for w := 0; w < cap(errc); w++ {
		lo, hi := w*per, min((w+1)*per, len(states))
		if lo >= hi {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				v, err := aggregate.Encode(states[i])
				if err != nil {
					errc <- fmt.Errorf("encode %s/%s: %w", aggregate.KindOf(states[i]), states[i].Head().ID, err)
					return
				}
				vals[i] = v
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	total := map[string]uint64{}
	for i, s := range states {
		k := aggregate.KindOf(s)
		id := s.Head().ID
		for _, c := range counts(s) {
			total[c]++
		}
		img[string(stateBucket(k))][id] = vals[i]
		for _, key := range indexKeys(k, id, s) {
			img[string(bucketIndex)][string(key)] = nil
		}
		for _, key := range deadlineKeys(k, id, s) {
			img[string(bucketDeadlines)][string(key)] = nil
		}
	}
	for id, r := range commands {
		v := make([]byte, 0, 16)
		v = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(v, r.First), r.Last)
		img[string(bucketCommands)][id] = v
	}
	sm := img[string(bucketStreams)]
	for sid, seqs := range streams {
		for _, seq := range seqs {
			sm[string(StreamKey(sid, seq))] = nil
		}
	}
	for name, n := range total {
		img[string(bucketMeta)][string(countKey(name))] = binary.BigEndian.AppendUint64(nil, n)
	}
	if checkpoint > 0 {
		img[string(bucketMeta)][string(keyCheckpoint)] = binary.BigEndian.AppendUint64(nil, checkpoint)
	}
	img[string(bucketMeta)][string(keyVersion)] = binary.BigEndian.AppendUint64(nil, Version)
	return img, nil
}

// ReadImage copies the projection buckets out of tx.
func ReadImage(tx *bolt.Tx) (engine.Image, error) {
	img := engine.Image{}
	for _, name := range Buckets() {
		m := map[string][]byte{}
		img[string(name)] = m
		b := tx.Bucket(name)
		if b == nil {
			continue
		}
		if bytes.Equal(name, bucketMeta) && b.Sequence() != 0 {
			m[string(keyCheckpoint)] = binary.BigEndian.AppendUint64(nil, b.Sequence())
		}
		if err := b.ForEach(func(k, v []byte) error {
			if len(v) == 0 {
				v = nil
			}
			m[string(k)] = bytes.Clone(v)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return img, nil
}

// WriteImage drops the projection buckets and writes img into them in key
// order.
func WriteImage(tx *bolt.Tx, img engine.Image) error {
	if err := Drop(tx); err != nil {
		return err
	}
	for _, name := range Buckets() {
		m := img[string(name)]
		b := tx.Bucket(name)
		b.FillPercent = 1.0 // keys arrive sorted
		if bytes.Equal(name, bucketMeta) {
			if v := m[string(keyCheckpoint)]; len(v) == 8 {
				if err := b.SetSequence(binary.BigEndian.Uint64(v)); err != nil {
					return err
				}
			}
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if bytes.Equal(name, bucketMeta) && k == string(keyCheckpoint) {
				continue // held as the bucket's sequence
			}
			if err := b.Put([]byte(k), m[k]); err != nil {
				return fmt.Errorf("write %s: %w", name, err)
			}
		}
	}
	return nil
}

// WriteImageChunked is WriteImage in transactions of at most chunk keys,
// so the pages one transaction holds until it commits stay bounded. The
// first transaction drops the buckets and leaves them without a version,
// the last writes p.meta (counters, version, checkpoint): until it
// commits the projections are of no current version, so an interrupted
// write is rebuilt again. The image is consumed: what is written leaves
// it, so its memory goes as the write proceeds.
func WriteImageChunked(db *bolt.DB, img engine.Image, chunk int) error {
	err := db.Update(func(tx *bolt.Tx) error {
		if err := Drop(tx); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Delete(keyVersion)
	})
	if err != nil {
		return err
	}
	for _, name := range Buckets() {
		if bytes.Equal(name, bucketMeta) {
			continue
		}
		m := img[string(name)]
		keys := slices.Sorted(maps.Keys(m))
		for len(keys) > 0 {
			n := min(chunk, len(keys))
			err := db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket(name)
				b.FillPercent = 1.0 // keys arrive sorted
				for _, k := range keys[:n] {
					if err := b.Put([]byte(k), m[k]); err != nil {
						return fmt.Errorf("write %s: %w", name, err)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, k := range keys[:n] {
				delete(m, k)
			}
			keys = keys[n:]
		}
	}
	return db.Update(func(tx *bolt.Tx) error {
		m := img[string(bucketMeta)]
		b := tx.Bucket(bucketMeta)
		if v := m[string(keyCheckpoint)]; len(v) == 8 {
			if err := b.SetSequence(binary.BigEndian.Uint64(v)); err != nil {
				return err
			}
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if k == string(keyCheckpoint) {
				continue // held as the bucket's sequence
			}
			if err := b.Put([]byte(k), m[k]); err != nil {
				return fmt.Errorf("write %s: %w", bucketMeta, err)
			}
		}
		return nil
	})
}

// KindOfBucket reports which aggregate kind a state bucket holds.
func KindOfBucket(name string) (events.Kind, bool) {
	const p = "p.state."
	if len(name) > len(p) && name[:len(p)] == p {
		return events.Kind(name[len(p):]), true
	}
	return "", false
}
