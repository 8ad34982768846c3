package enginetest

import (
	"context"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/projections"
	bolt "go.etcd.io/bbolt"
)

// Open opens an engine for a test and, when the test ends, closes it and
// verifies its log file (every record's hash, the chain, every transition
// through the state machines, the projections against a rebuild, bbolt's
// own check): as bbolt's tests check every database they touch, every
// test that writes a log proves it sound. The test may close the engine
// itself. The projections are the bbolt ones (projections.Store) unless
// opt names others. Benchmarks are not verified; their logs are large and their
// correctness is the tests' business.
func Open(tb testing.TB, path string, opt engine.Options) *engine.Engine {
	tb.Helper()
	if opt.Projections == nil {
		opt.Projections = projections.Store{}
	}
	e, err := engine.Open(path, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		e.Close()
		if _, bench := tb.(*testing.B); !bench {
			VerifyFile(tb, path)
		}
	})
	return e
}

// Verify fails tb unless e's log verifies.
func Verify(tb testing.TB, e *engine.Engine) {
	tb.Helper()
	rep, err := e.Verify(context.Background())
	if err != nil {
		tb.Errorf("verify: %v", err)
		return
	}
	for i, p := range rep.Problems {
		if i == 10 {
			tb.Errorf("... %d problems in all", len(rep.Problems))
			break
		}
		tb.Errorf("log does not verify: seq %d: %s: %s", p.Seq, p.Code, p.Message)
	}
}

// VerifyFile fails tb unless the log at path, which no engine holds,
// verifies.
func VerifyFile(tb testing.TB, path string) {
	tb.Helper()
	rep, err := engine.VerifyFile(context.Background(), projections.Store{}, path, 5*time.Second)
	if err != nil {
		tb.Errorf("verify %s: %v", path, err)
		return
	}
	for i, p := range rep.Problems {
		if i == 10 {
			tb.Errorf("... %d problems in all", len(rep.Problems))
			break
		}
		tb.Errorf("%s does not verify: seq %d: %s: %s", path, p.Seq, p.Code, p.Message)
	}
}

// Answer runs c on e like engine.Exec, failing tb on an error, and returns
// what c answered with and the result.
func Answer[V any, C engine.Answerer[V]](tb testing.TB, e *engine.Engine, m engine.Meta, c C) (V, engine.Result) {
	tb.Helper()
	v, res, err := engine.Exec[V](context.Background(), e, m, c)
	if err != nil {
		tb.Fatalf("%T: %v", c, err)
	}
	return v, res
}

// ReplayDiff lists (at most max) where e's projections differ from what a
// replay of its log derives: none, when replay equality holds (MISSION.md
// rule 5).
func ReplayDiff(tb testing.TB, e *engine.Engine, max int) []string {
	tb.Helper()
	var live engine.Image
	var err error
	if verr := e.DB().View(func(tx *bolt.Tx) error { live, err = projections.ReadImage(tx); return err }); verr != nil || err != nil {
		tb.Fatalf("read the projections: %v %v", verr, err)
	}
	replayed, _, err := e.ReplayImage(context.Background(), 0)
	if err != nil {
		tb.Fatalf("replay: %v", err)
	}
	return engine.Diff(live, replayed, max)
}
