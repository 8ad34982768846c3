package enginetest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/events"
)

// recordWith writes a small log whose second event names dir and a
// process id, as a recording on some machine would, and exports it.
func recordWith(t *testing.T, dir string, pid string) []byte {
	t.Helper()
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	e := Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{NoSync: true, Clock: clock})
	ctx := context.Background()
	for i, summary := range []string{"first", "built in " + dir + " by pid " + pid, "third"} {
		p := SubmitPayload(i)
		p.TaskSummary = summary
		if _, err := e.Append(ctx, engine.Meta{Actor: events.ActorCLI}, events.StreamID{Kind: events.KindJob, ID: "job-" + summary[:5]}, 0, p); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if err := e.Export(&b, 1, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Two recordings that differ in a path and a process id, and so in
// every event id after them (the chain they derive from), are one log
// once canonical: a log whose hashes chain, that imports and replays.
func TestCanonMakesRecordingsEqual(t *testing.T) {
	a, b := recordWith(t, "/tmp/run-a/work", "4242"), recordWith(t, "/var/tmp/other-run/work", "977")
	if bytes.Equal(a, b) {
		t.Fatal("the recordings are the same already: the test shows nothing")
	}
	canon := func(dir string) Canon {
		return Canon{Paths: map[string]string{dir: "/golden/work"},
			Fields: map[string]*regexp.Regexp{"pid": regexp.MustCompile(`by pid (\d+)`)}}
	}
	ca, err := canon("/tmp/run-a/work").Apply(a)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := canon("/var/tmp/other-run/work").Apply(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca, cb) {
		t.Fatalf("canonical logs differ at %s", FirstDifference(ca, cb))
	}
	if !strings.Contains(string(ca), "built in /golden/work by pid 1001") || uuidPattern.FindString(string(ca)) != canonicalUUID(1) {
		t.Fatalf("not renamed:\n%s", ca)
	}
	if err := engine.ReadExport(bytes.NewReader(ca), func(events.Envelope) error { return nil }); err != nil {
		t.Fatalf("the canonical log's chain: %v", err)
	}
	path := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(path, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, n := Replay(t, path); n != 3 {
		t.Fatalf("replayed %d events", n)
	}
}
