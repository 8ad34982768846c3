package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

var updateGolden = flag.Bool("update", false, "rewrite golden projections (and create missing fixture logs)")

// goldenLogs are fixture logs that must keep replaying to their checked-in
// projections forever. A log, once written, is never regenerated: a change
// that breaks one of them breaks old users' logs.
var goldenLogs = []struct {
	name  string
	seed  uint64
	steps int
}{
	{"random-seed7", 7, 3000},
}

func TestGoldenLogsReplay(t *testing.T) {
	for _, g := range goldenLogs {
		t.Run(g.name, func(t *testing.T) {
			logPath := filepath.Join("..", "fixtures", "logs", g.name+".jsonl")
			projPath := filepath.Join("..", "fixtures", "logs", g.name+".projections.json")
			if _, err := os.Stat(logPath); os.IsNotExist(err) && *updateGolden {
				writeFixtureLog(t, logPath, g.seed, g.steps)
			}
			f, err := os.Open(logPath)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			e := open(t, t.TempDir(), engine.Options{NoSync: true})
			st, err := e.Import(context.Background(), f)
			if err != nil {
				t.Fatal(err)
			}
			if st.Events != uint64(g.steps) {
				t.Fatalf("imported %d events, want %d", st.Events, g.steps)
			}
			mustVerify(t, e)
			got := renderImage(image(t, e))
			if *updateGolden {
				if err := os.WriteFile(projPath, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(projPath)
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

// renderImage prints an image as stable, reviewable JSON: bucket -> quoted
// key -> value (JSON values inline, anything else quoted).
func renderImage(img engine.Image) []byte {
	var names []string
	for n := range img {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, n := range names {
		keys := make([]string, 0, len(img[n]))
		for k := range img[n] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("  " + strconv.Quote(n) + ": {")
		for j, k := range keys {
			v := img[n][k]
			rv := strconv.Quote(string(v))
			if json.Valid(v) {
				rv = string(v)
			}
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n    " + strconv.Quote(k) + ": " + rv)
		}
		b.WriteString("\n  }")
		if i < len(names)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.Bytes()
}
