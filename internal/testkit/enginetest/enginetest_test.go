package enginetest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/projections"
	bolt "go.etcd.io/bbolt"
)

// The harness is what the engine's random, crash and replay tests stand
// on: a generator that covered only some moves, or a verifier that never
// failed, would let those tests pass while proving less than they say.
// So its own two promises are checked here.

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// Every move and update of every machine is reached by the generator
// (within 20,000 steps of one seed), and every step it makes is legal:
// driven into a real engine, nothing is refused and the log verifies.
func TestGeneratorReachesEveryMoveLegally(t *testing.T) {
	g := enginetest.NewGenerator(7, "cov-")
	seen := map[events.Kind]map[string]bool{}
	for range 20_000 {
		s := g.Next()
		if seen[s.Stream.Kind] == nil {
			seen[s.Stream.Kind] = map[string]bool{}
		}
		seen[s.Stream.Kind][fsm.EventName(s.Payload)] = true
		s.Commit()
	}
	for _, tab := range fsm.Tables() {
		for _, ev := range tab.Events() {
			if !seen[tab.Kind][ev] {
				t.Errorf("%s: the generator never made %s", tab.Kind, ev)
			}
		}
	}

	path := filepath.Join(t.TempDir(), "cbth.db")
	e := enginetest.Open(t, path, engine.Options{Clock: engine.NewManualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), NoSync: true})
	if err := enginetest.Drive(context.Background(), e, enginetest.NewGenerator(11, "drv-"), 2_000); err != nil {
		t.Fatalf("a generated step was refused: %v", err)
	}
	rec := &recorder{TB: t}
	enginetest.Verify(rec, e)
	if len(rec.errors) != 0 {
		t.Fatalf("a generated log does not verify: %v", rec.errors)
	}
}

// VerifyFile fails its test on a log whose record was changed after it
// was written, naming the seq; on the untouched log it says nothing.
func TestVerifyFileFailsATamperedLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cbth.db")
	e, err := engine.Open(path, engine.Options{Clock: engine.NewManualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), NoSync: true,
		Projections: projections.Store{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := enginetest.Drive(context.Background(), e, enginetest.NewGenerator(3, "v-"), 50); err != nil {
		t.Fatal(err)
	}
	e.Close()
	clean := &recorder{TB: t}
	enginetest.VerifyFile(clean, path)
	if len(clean.errors) != 0 {
		t.Fatalf("the untouched log: %v", clean.errors)
	}

	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte{0, 0, 0, 0, 0, 0, 0, 20}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("log"))
		v := append([]byte(nil), b.Get(key)...)
		if len(v) < 50 {
			return fmt.Errorf("record 20 is %d bytes", len(v))
		}
		v[40] ^= 0x01
		return b.Put(key, v)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	bad := &recorder{TB: t}
	enginetest.VerifyFile(bad, path)
	if len(bad.errors) == 0 || !strings.Contains(strings.Join(bad.errors, "\n"), "20") {
		t.Fatalf("a changed record 20: %v", bad.errors)
	}
}

// ReplayDiff finds nothing on a sound log and names the difference when
// a projection no longer matches the log (a state bucket's entry gone).
func TestReplayDiffSeesADamagedProjection(t *testing.T) {
	e := enginetest.Open(&recorder{TB: t}, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: engine.NewManualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)), NoSync: true})
	if err := enginetest.Drive(context.Background(), e, enginetest.NewGenerator(5, "r-"), 200); err != nil {
		t.Fatal(err)
	}
	if d := enginetest.ReplayDiff(t, e, 5); len(d) != 0 {
		t.Fatalf("a sound log: %v", d)
	}
	err := e.DB().Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("p.state." + string(events.KindJob)))
		k, _ := b.Cursor().First()
		if k == nil {
			return fmt.Errorf("no job state to damage")
		}
		return b.Delete(k)
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := enginetest.ReplayDiff(t, e, 5); len(d) == 0 {
		t.Fatal("a projection missing a state: no difference found")
	}
}
