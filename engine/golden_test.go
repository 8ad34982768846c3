package engine_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

var updateGolden = flag.Bool("update", false, "rewrite golden projections (and create missing fixture logs)")

// goldenLogs are synthetic fixture logs that must keep replaying to their
// checked-in projections forever. A log, once written, is never
// regenerated: a change that breaks one of them breaks old users' logs.
var goldenLogs = []struct {
	name  string
	seed  uint64
	steps int
}{
	{"random-seed7", 7, 3000},
}

// Every fixture log replays to its checked-in projections, byte for byte:
// the synthetic ones above and the scenarios cmd/cbth records through the
// binary (TestGoldenScenarios there), whose logs only that test rewrites.
// -update rewrites the projections and says which changed.
func TestGoldenLogsReplay(t *testing.T) {
	dir := filepath.Join("..", "fixtures", "logs")
	for _, g := range goldenLogs {
		logPath := filepath.Join(dir, g.name+".jsonl")
		if _, err := os.Stat(logPath); os.IsNotExist(err) && *updateGolden {
			writeFixtureLog(t, logPath, g.seed, g.steps)
		}
	}
	logs, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil || len(logs) < len(goldenLogs)+7 {
		t.Fatalf("fixture logs %v (%v): want the synthetic ones and the seven recorded scenarios", logs, err)
	}
	for _, logPath := range logs {
		name := strings.TrimSuffix(filepath.Base(logPath), ".jsonl")
		t.Run(name, func(t *testing.T) {
			projPath := filepath.Join(dir, name+".projections.json")
			got, n := enginetest.Replay(t, logPath)
			for _, g := range goldenLogs {
				if g.name == name && n != uint64(g.steps) {
					t.Fatalf("imported %d events, want %d", n, g.steps)
				}
			}
			want, err := os.ReadFile(projPath)
			if *updateGolden && !bytes.Equal(got, want) {
				if err := os.WriteFile(projPath, got, 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: rewritten (%d events): it no longer replayed to the file", projPath, n)
				return
			}
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s no longer replays to %s; if the change is intended, run go test ./engine -run Golden -update and explain the break", logPath, projPath)
			}
		})
	}
}

func writeFixtureLog(t *testing.T, path string, seed uint64, steps int) {
	clock := engine.NewManualClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	e := open(t, t.TempDir(), engine.Options{NoSync: true, Clock: clock})
	g := enginetest.NewGenerator(seed, "")
	for i := 0; i < steps; i++ {
		s := g.Next()
		meta := engine.Meta{Actor: events.ActorCLI, CorrelationID: fmt.Sprintf("corr-%d", i/10)}
		if i%5 == 0 {
			meta.CommandID = fmt.Sprintf("cmd-%d", i)
		}
		if _, err := e.Append(context.Background(), meta, s.Stream, s.Expected, s.Payload); err != nil {
			t.Fatal(err)
		}
		s.Commit()
		clock.Advance(time.Second)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := e.Export(f, 1, nil); err != nil {
		t.Fatal(err)
	}
}
