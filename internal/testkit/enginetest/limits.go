package enginetest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The physical references every engine figure is compared against,
// measured on the same disk in the same run (perf-anchors.md method).

// RefEvent is the reference event of perf-anchors.md: about 350 bytes of
// JSON with a nested payload.
type RefEvent struct {
	Seq     uint64     `json:"seq"`
	ID      string     `json:"id"`
	Type    string     `json:"type"`
	Time    string     `json:"time"`
	Actor   string     `json:"actor"`
	Subject string     `json:"subject"`
	Payload RefPayload `json:"payload"`
}

// RefPayload is RefEvent's nested payload.
type RefPayload struct {
	Title    string   `json:"title"`
	Priority int      `json:"priority"`
	Tags     []string `json:"tags"`
	Parent   string   `json:"parent"`
	Note     string   `json:"note"`
}

// NewRefEvent returns reference event number i.
func NewRefEvent(i uint64) RefEvent {
	return RefEvent{
		Seq: i, ID: fmt.Sprintf("01JD%022d", i), Type: "job.submitted", Time: "2026-11-21T10:00:00.000000001Z",
		Actor: "cli", Subject: fmt.Sprintf("job/%d", i),
		Payload: RefPayload{Title: "wait for CI on pull request 1234 of the example repository", Priority: 3,
			Tags: []string{"ci", "github", "long"}, Parent: "thread-0123456789abcdef",
			Note: "the reviewer asked for a rerun after the flaky integration test failed twice in a row"},
	}
}

// RawFsync measures writing 4 KiB in place followed by the flush bbolt
// uses (fdatasync on Linux), for d.
// It returns operations per second: the flush limit.
func RawFsync(dir string, d time.Duration) (float64, error) {
	f, err := os.OpenFile(filepath.Join(dir, "fsync.raw"), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		buf[0] = byte(n)
		if _, err := f.WriteAt(buf, 0); err != nil {
			return 0, err
		}
		if err := datasync(f); err != nil {
			return 0, err
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// BareUpdate measures one reference event per bbolt Update with default
// (durable) options, for d: "base B" of perf-anchors.md. It returns
// Updates per second.
//
// The events go into the bbolt file at path, created if needed and kept:
// a caller comparing against a log that grows across rounds passes the
// same path each round, so that both trees grow through the same depths.
// A fresh file every round would compare a two-level tree against a
// three-level one, and one page per commit less is a tenth of the time.
func BareUpdate(path string, d time.Duration) (float64, error) {
	g, err := BareGroup(path, d, 1)
	return g.Rate, err
}

// GroupResult is what BareGroup measured.
type GroupResult struct {
	Rate float64       // Updates per second
	P50  time.Duration // median duration of one Update
	// Writes is the mean number of page writes per Update (bbolt's
	// TxStats.Write: each dirty page, the freelist and the meta page):
	// what the flush of a commit has to carry.
	Writes float64
}

// BareGroup measures bbolt Updates of k reference events each into the
// file at path (kept, as for BareUpdate), for d: the floor under a group
// commit of k.
func BareGroup(path string, d time.Duration, k int) (GroupResult, error) {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return GroupResult{}, err
	}
	defer db.Close()
	writes0 := PageWrites(db)
	name := []byte("events")
	var took []time.Duration
	start := time.Now()
	for time.Since(start) < d {
		t0 := time.Now()
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(name)
			if err != nil {
				return err
			}
			b.FillPercent = 1.0
			for range k {
				seq, _ := b.NextSequence()
				v, err := json.Marshal(NewRefEvent(seq))
				if err != nil {
					return err
				}
				if err := b.Put(binary.BigEndian.AppendUint64(nil, seq), v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return GroupResult{}, err
		}
		took = append(took, time.Since(t0))
	}
	g := GroupResult{
		Rate:   float64(len(took)) / time.Since(start).Seconds(),
		Writes: float64(PageWrites(db)-writes0) / float64(len(took)),
	}
	slices.Sort(took)
	g.P50 = took[len(took)/2]
	return g, nil
}

// PageWrites is the number of page writes db's committed transactions
// have made since it was opened (each dirty page, each freelist and each
// meta page).
func PageWrites(db *bolt.DB) int64 {
	st := db.Stats()
	return st.TxStats.GetWrite()
}

// BuildRefLog writes n reference events into a fresh bbolt file at path in
// bulk (not durable per event) for the scan reference.
func BuildRefLog(path string, n int) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true})
	if err != nil {
		return err
	}
	defer db.Close()
	for i := 0; i < n; i += 10000 {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("events"))
			if err != nil {
				return err
			}
			b.FillPercent = 1.0
			for j := i; j < i+10000 && j < n; j++ {
				v, _ := json.Marshal(NewRefEvent(uint64(j + 1)))
				if err := b.Put(binary.BigEndian.AppendUint64(nil, uint64(j+1)), v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return db.Sync()
}

// BareScanDecode walks a reference log with a cursor and json.Unmarshals
// every value on one goroutine: "base R" of perf-anchors.md. It returns
// events per second.
func BareScanDecode(path string) (float64, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	n := 0
	start := time.Now()
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("events")).ForEach(func(_, v []byte) error {
			var e RefEvent
			if err := json.Unmarshal(v, &e); err != nil {
				return err
			}
			n++
			return nil
		})
	})
	return float64(n) / time.Since(start).Seconds(), err
}
