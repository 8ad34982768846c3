package desktop_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/desktop"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	desktopcmd "github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// The inbox as the publisher writes it: directories private to the user,
// files 0600 replaced whole through a temp file that never stays behind;
// what it lists, reads and removes is what is there.
func TestInboxFiles(t *testing.T) {
	for _, noSync := range []bool{false, true} {
		f := desktop.InboxFiles{Dir: filepath.Join(t.TempDir(), "inbox"), NoSync: noSync}
		if err := f.MkdirAll("snapshots/7"); err != nil {
			t.Fatal(err)
		}
		if err := f.Write("snapshots/7/ready-threads.json", []byte("one")); err != nil {
			t.Fatal(err)
		}
		if err := f.Write("snapshots/7/ready-threads.json", []byte("two")); err != nil {
			t.Fatal(err)
		}
		if err := f.SyncDir("snapshots/7"); err != nil {
			t.Fatal(err)
		}
		p := f.Path("snapshots/7/ready-threads.json")
		if p != filepath.Join(f.Dir, "snapshots", "7", "ready-threads.json") {
			t.Fatalf("path %s", p)
		}
		if b, err := f.Read("snapshots/7/ready-threads.json"); err != nil || string(b) != "two" {
			t.Fatalf("read %q, %v", b, err)
		}
		for _, c := range []struct {
			rel  string
			mode os.FileMode
		}{{"", 0o700}, {"snapshots", 0o700}, {"snapshots/7", 0o700}, {"snapshots/7/ready-threads.json", 0o600}} {
			if fi, err := os.Stat(f.Path(c.rel)); err != nil || fi.Mode().Perm() != c.mode {
				t.Errorf("%q: %v %v, want mode %v", c.rel, fi, err, c.mode)
			}
		}
		ents, _ := os.ReadDir(f.Path("snapshots/7"))
		if len(ents) != 1 {
			t.Errorf("left in the revision: %v", ents)
		}
		f.MkdirAll("snapshots/8")
		os.WriteFile(f.Path("snapshots/notadir"), nil, 0o600)
		if got := f.Dirs("snapshots"); !slices.Equal(got, []string{"7", "8"}) {
			t.Errorf("dirs %v", got)
		}
		if f.Dirs("nope") != nil || !f.Exists("snapshots/8") || f.Exists("snapshots/9") {
			t.Error("Dirs or Exists of what is not there")
		}
		os.Symlink("/nonexistent", f.Path("dangling"))
		if !f.Exists("dangling") {
			t.Error("a link is followed by Exists")
		}
		if err := f.RemoveAll("snapshots/7"); err != nil || f.Exists("snapshots/7") {
			t.Errorf("remove: %v", err)
		}
		if err := f.Write("missing/dir/file", nil); err == nil {
			t.Error("a write into a missing directory succeeded")
		}
	}
}

// The running cbth has a fingerprint for every read transport, each its
// own, the one the readers observe.
func TestObserveFingerprints(t *testing.T) {
	fps, err := desktop.ObserveFingerprints("test")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, tr := range desktopcmd.ReadTransports {
		fp := fps[tr]
		want, _ := inbox.Observe("test", tr)
		if fp == "" || fp != want || seen[fp] {
			t.Errorf("%s: %q (want %q), or shared", tr, fp, want)
		}
		seen[fp] = true
	}
	other, _ := desktop.ObserveFingerprints("other")
	if other[desktopcmd.ReadTransports[0]] == fps[desktopcmd.ReadTransports[0]] {
		t.Error("another version has the same fingerprint")
	}
}

// The pull target's gate reads the daemon's state: a batch it does not
// know is held back with the reason, not delivered.
func TestTargetGateOfAnUnknownBatch(t *testing.T) {
	e := enginetest.Open(t, filepath.Join(t.TempDir(), "cbth.db"), engine.Options{Clock: engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)), NoSync: true})
	tg := &desktop.Target{Read: e.Read, Now: time.Now}
	g := tg.Gate(context.Background(), target.Head{ThreadID: "S", BatchID: "b-missing"})
	if g.OK || !strings.Contains(g.Reason, "no batch b-missing") {
		t.Fatalf("gate %+v", g)
	}
	if s := tg.Spec(); s.Kind != target.Pull || s.Name != "desktop" {
		t.Fatalf("spec %+v", s)
	}
}
