package inbox_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections/inbox"
)

const bridge = "bridge-thread"

var created = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func header(kind string, rev uint64) inbox.Header {
	return inbox.Header{SchemaVersion: inbox.SchemaVersion, Kind: kind, SnapshotRevision: rev, BridgeThreadID: bridge, CreatedAt: created}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Dir(path), 0o700)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// publish writes revision rev of an inbox whose first ready thread is
// ready, bound through its binding, under a validated installation with
// fingerprint fp; the manifest names it.
func publish(t *testing.T, dir string, rev uint64, ready, fp string) inbox.Manifest {
	t.Helper()
	f := inbox.RevisionFiles(rev)
	writeJSON(t, filepath.Join(dir, f.ReadyThreads), inbox.ReadyThreads{Header: header(inbox.KindReadyThreads, rev),
		Entries: []inbox.ReadyEntry{{SourceThreadID: ready, BatchID: "b-" + ready, AttemptID: "a-" + ready, Generation: rev, SnapshotRevision: rev}}})
	writeJSON(t, filepath.Join(dir, f.ArmPendingBindings), inbox.ArmPendingBindings{Header: header(inbox.KindArmPending, rev), Entries: []inbox.ArmPendingEntry{}})
	writeJSON(t, filepath.Join(dir, f.PauseDueBindings), inbox.PauseDueBindings{Header: header(inbox.KindPauseDue, rev), Entries: []inbox.PauseDueEntry{}})
	writeJSON(t, filepath.Join(dir, f.Bindings), inbox.Bindings{Header: header(inbox.KindBindings, rev),
		Entries: []inbox.BindingEntry{{SourceThreadID: ready, BindingState: "bound", CallerAutomationID: "automation-" + ready, BridgeThreadID: bridge}}})
	writeJSON(t, filepath.Join(dir, f.InstallationState), inbox.InstallationState{Header: header(inbox.KindInstallation, rev),
		ReadTransport: "direct_file_read", ValidationFingerprint: fp, AutomaticContinuation: true})
	m := inbox.Manifest{Header: header(inbox.KindManifest, rev), PublishedAt: created, FreshUntil: created.Add(time.Minute), Files: f}
	writeJSON(t, filepath.Join(dir, inbox.ManifestName), m)
	return m
}

func claim(dir, bridgeID, fp string) (inbox.Claim, error) {
	s, err := inbox.Reader{Dir: dir, Bridge: bridgeID}.Open()
	if err != nil {
		return inbox.Claim{}, err
	}
	defer s.Close()
	if err := s.CheckAll(); err != nil {
		return inbox.Claim{}, err
	}
	return s.Claim(func(string) (string, error) { return fp, nil })
}

// The readers fail closed on every inconsistency of the published files,
// each with its code, and read a sound revision as the daemon wrote it.
// (cmd/cbth's TestDesktop_ReadersFailClosed shows one refusal through the
// binary; this is where each rule is held.)
func TestReadersFailClosed(t *testing.T) {
	dir := t.TempDir()
	publish(t, dir, 1, "S0", "fp")
	m := publish(t, dir, 2, "S1", "fp")
	ready := filepath.Join(dir, m.Files.ReadyThreads)
	manifest := filepath.Join(dir, inbox.ManifestName)
	good, _ := os.ReadFile(ready)
	goodManifest, _ := os.ReadFile(manifest)
	restore := func() {
		os.Remove(ready)
		os.WriteFile(ready, good, 0o600)
		os.WriteFile(manifest, goodManifest, 0o600)
	}
	c, err := claim(dir, bridge, "fp")
	if err != nil || c.Ready == nil || c.Ready.SourceThreadID != "S1" || c.Binding.CallerAutomationID != "automation-S1" || c.SnapshotRevision != 2 {
		t.Fatalf("a sound revision: %+v, %v", c, err)
	}
	prev, _ := os.ReadFile(filepath.Join(dir, inbox.RevisionFiles(1).ReadyThreads))
	outside := filepath.Join(t.TempDir(), "ready.json")
	os.WriteFile(outside, good, 0o600)
	for _, c := range []struct {
		name   string
		damage func()
		bridge string
		code   errs.Code
		says   string
	}{
		{"another bridge thread", func() {}, "another-bridge", errs.ESTALE, "bridge_thread_mismatch"},
		{"another schema", func() {
			os.WriteFile(ready, []byte(strings.Replace(string(good), `"schema_version":1`, `"schema_version":2`, 1)), 0o600)
		}, bridge, errs.EVERSION, "schema_version_mismatch"},
		{"another revision's file", func() { os.WriteFile(ready, prev, 0o600) }, bridge, errs.ESTALE, "revision_mismatch"},
		{"another kind", func() {
			os.WriteFile(ready, []byte(strings.Replace(string(good), `"kind":"ready_threads"`, `"kind":"bindings"`, 1)), 0o600)
		}, bridge, errs.ECORRUPT, "malformed"},
		{"a missing file", func() { os.Remove(ready) }, bridge, errs.ENOENT, "missing"},
		{"an oversized file", func() { os.Truncate(ready, inbox.MaxFileBytes+1) }, bridge, errs.EFBIG, "oversized"},
		{"a FIFO in a file's place", func() { os.Remove(ready); syscall.Mkfifo(ready, 0o600) }, bridge, errs.EACCES, "not_regular"},
		{"a link out of the inbox", func() { os.Remove(ready); os.Symlink(outside, ready) }, bridge, errs.EACCES, "symbolic link"},
		{"a manifest path out of the inbox", func() {
			os.WriteFile(manifest, []byte(strings.Replace(string(goodManifest), `"snapshots/`, `"../snapshots/`, 1)), 0o600)
		}, bridge, errs.EACCES, "path_escapes_inbox"},
		{"no manifest", func() { os.Remove(manifest) }, bridge, errs.ENOENT, "missing"},
	} {
		c.damage()
		_, err := claim(dir, c.bridge, "fp")
		if errs.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %s saying %q", c.name, err, c.code, c.says)
		}
		restore()
	}
}

// A claim is a peek: the first ready entry and its binding, or why none:
// automatic continuation off, this cbth not the validated one, nothing
// ready. Freshness is the manifest's fresh_until on the caller's clock.
func TestClaimAndFreshness(t *testing.T) {
	dir := t.TempDir()
	m := publish(t, dir, 3, "S1", "fp")
	if c, err := claim(dir, bridge, "other-fp"); err != nil || c.Ready != nil || c.NotReadyReason != "fingerprint_mismatch" {
		t.Errorf("another cbth: %+v, %v", c, err)
	}
	writeJSON(t, filepath.Join(dir, m.Files.ReadyThreads), inbox.ReadyThreads{Header: header(inbox.KindReadyThreads, 3), Entries: []inbox.ReadyEntry{}})
	if c, err := claim(dir, bridge, "fp"); err != nil || c.Ready != nil || c.NotReadyReason != "no_ready_thread" {
		t.Errorf("nothing ready: %+v, %v", c, err)
	}
	writeJSON(t, filepath.Join(dir, m.Files.InstallationState), inbox.InstallationState{Header: header(inbox.KindInstallation, 3), ValidationFingerprint: "fp"})
	if c, err := claim(dir, bridge, "fp"); err != nil || c.NotReadyReason != "automatic_continuation_off" {
		t.Errorf("not validated: %+v, %v", c, err)
	}
	s, err := inbox.Reader{Dir: dir, Bridge: bridge}.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Fresh(created.Add(59 * time.Second)); err != nil {
		t.Errorf("within fresh_until: %v", err)
	}
	if err := s.Fresh(created.Add(time.Minute)); errs.CodeOf(err) != errs.ESTALE || !strings.Contains(err.Error(), "stale") {
		t.Errorf("at fresh_until: %v", err)
	}
	if _, err := (inbox.Reader{Dir: dir}).Open(); err == nil {
		t.Error("a reader with no bridge thread opened the inbox")
	}
}
