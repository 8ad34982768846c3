// Package inbox is the Desktop snapshot format and its sandbox-safe
// reader. The daemon publishes revisions of the snapshot into
// $CBTH_HOME/inbox (projections/snapshot decides what they hold,
// adapters/desktop writes them); a Codex Desktop heartbeat reads
// them, either directly or through cbth's read helpers, which use this
// package alone.
//
// A heartbeat runs inside a sandbox that lets it read the home's files and
// nothing else: it cannot chmod, write, lock, connect to the daemon's
// socket or open the log. So the reader opens files read-only and
// non-blocking, under an os.Root of the inbox, and does nothing else: it
// imports no storage, socket or home-setup code (TestReaderImports), and
// the readers' sandbox test traces every system call they make.
package inbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
)

// SchemaVersion is the version of every snapshot file. A reader refuses
// any other.
const SchemaVersion = 1

// File names in the inbox. The manifest is the only file ever replaced;
// each revision's files live in snapshots/<revision>/ and never change
// once the manifest has named them.
const (
	ManifestName           = "current-snapshot.json"
	SnapshotsDir           = "snapshots"
	ReadyThreadsName       = "ready-threads.json"
	ArmPendingName         = "arm-pending-bindings.json"
	PauseDueName           = "pause-due-bindings.json"
	BindingsName           = "bindings.json"
	InstallationName       = "installation-state.json"
	LatestInstallationName = "desktop-installation-state.json" // convenience copy, not revision-consistent
)

// Kinds name what a file holds (its "kind" field).
const (
	KindManifest     = "current_snapshot"
	KindReadyThreads = "ready_threads"
	KindArmPending   = "arm_pending_bindings"
	KindPauseDue     = "pause_due_bindings"
	KindBindings     = "bindings"
	KindInstallation = "installation_state"
)

// MaxFileBytes bounds every file a reader accepts.
const MaxFileBytes = 32 << 20

// Header starts every snapshot file. SnapshotRevision is the manifest's
// revision: every file a manifest names carries the same one.
type Header struct {
	SchemaVersion    int       `json:"schema_version"`
	Kind             string    `json:"kind"`
	SnapshotRevision uint64    `json:"snapshot_revision"`
	BridgeThreadID   string    `json:"bridge_thread_id"`
	CreatedAt        time.Time `json:"created_at"`
}

func (h Header) head() Header { return h }

// Manifest is current-snapshot.json: the revision in force and where its
// files are, relative to the inbox. PublishedAt is the last time the
// daemon confirmed this revision is current (it rewrites the manifest
// every snapshot_interval while it runs); FreshUntil is PublishedAt plus
// snapshot_max_age, after which bridge-preflight's sandbox fallback
// refuses it as stale.
type Manifest struct {
	Header
	PublishedAt time.Time `json:"published_at"`
	FreshUntil  time.Time `json:"fresh_until"`
	LogSeq      uint64    `json:"log_seq"`
	Files       Files     `json:"files"`
}

// Files locates a revision's files, relative to the inbox.
type Files struct {
	ReadyThreads       string `json:"ready_threads"`
	ArmPendingBindings string `json:"arm_pending_bindings"`
	PauseDueBindings   string `json:"pause_due_bindings"`
	Bindings           string `json:"bindings"`
	InstallationState  string `json:"installation_state"`
}

// RevisionFiles returns the locators of revision rev's files.
func RevisionFiles(rev uint64) Files {
	dir := SnapshotsDir + "/" + strconv.FormatUint(rev, 10) + "/"
	return Files{ReadyThreads: dir + ReadyThreadsName, ArmPendingBindings: dir + ArmPendingName,
		PauseDueBindings: dir + PauseDueName, Bindings: dir + BindingsName, InstallationState: dir + InstallationName}
}

// ReadyEntry is one thread the bridge may arm, in the canonical fair
// order. The first five fields are the caller prompt token; SnapshotPath
// is a bridge-side locator (ByThreadPath: where the thread's operator
// export goes, which v1 does not write; never read on the automatic path,
// never put into a caller prompt) and RequiresArtifactRead gating
// metadata (always false here: such batches never become ready, they go
// to the operator).
type ReadyEntry struct {
	SourceThreadID       string `json:"source_thread_id"`
	BatchID              string `json:"batch_id"`
	AttemptID            string `json:"attempt_id"`
	Generation           uint64 `json:"generation"`
	SnapshotRevision     uint64 `json:"snapshot_revision"`
	SnapshotPath         string `json:"snapshot_path"`
	RequiresArtifactRead bool   `json:"requires_artifact_read"`
	// RelayMarker is the arm-pending relay marker, under the bridge
	// request RelayBridgeRequestID: a sandboxed bridge writes this arm
	// back by running `cbth desktop relay print --kind arm-pending
	// --marker M`. Empty while no relay scanner is bound for the bridge.
	// No file ever holds a relay line itself: a line that counts is
	// only ever printed, by a decision to print it.
	RelayMarker          string `json:"relay_marker"`
	RelayBridgeRequestID string `json:"relay_bridge_request_id"`
}

// ByThreadPath is a thread's locator in the inbox: by-thread/<thread>.json,
// the seed's operator and debug export, off in v1.
func ByThreadPath(thread string) string { return "by-thread/" + url.PathEscape(thread) + ".json" }

// ReadyThreads is ready-threads.json.
type ReadyThreads struct {
	Header
	Entries []ReadyEntry `json:"entries"`
}

// ArmPendingEntry is an attempt the bridge durably marked arm_pending
// whose arm it has not confirmed: the bridge reconciles it before arming
// anything for that thread. The bridge arm lease never appears here.
type ArmPendingEntry struct {
	SourceThreadID         string    `json:"source_thread_id"`
	BatchID                string    `json:"batch_id"`
	AttemptID              string    `json:"attempt_id"`
	Generation             uint64    `json:"generation"`
	SnapshotRevision       uint64    `json:"snapshot_revision"`
	CallerAutomationID     string    `json:"caller_automation_id"`
	BridgeRequestID        string    `json:"bridge_request_id"`
	ArmPendingSince        time.Time `json:"arm_pending_since"`
	ArmPendingDeadline     time.Time `json:"arm_pending_deadline"`
	BridgeArmLeaseDeadline time.Time `json:"bridge_arm_lease_deadline"`
	// RelayMarker is the arm-accepted relay marker (its line printed once
	// the caller automation is armed); RelayPausedMarker the paused one
	// (printed once the caller automation is proven PAUSED: the arm never
	// took effect); both under BridgeRequestID. Empty while no relay
	// scanner is bound for the bridge.
	RelayMarker       string `json:"relay_marker"`
	RelayPausedMarker string `json:"relay_paused_marker"`
}

// ArmPendingBindings is arm-pending-bindings.json.
type ArmPendingBindings struct {
	Header
	Entries []ArmPendingEntry `json:"entries"`
}

// PauseDueEntry is a binding whose caller heartbeat was armed for a
// generation not yet proven quiesced and may now be paused (its
// pause_not_before has passed); Overdue ones (pause_deadline passed)
// come first.
type PauseDueEntry struct {
	SourceThreadID     string    `json:"source_thread_id"`
	BindingID          string    `json:"binding_id"`
	BindingState       string    `json:"binding_state"`
	CallerAutomationID string    `json:"caller_automation_id"`
	ArmedGeneration    uint64    `json:"armed_generation"`
	PauseNotBefore     time.Time `json:"pause_not_before"`
	PauseDeadline      time.Time `json:"pause_deadline"`
	Overdue            bool      `json:"overdue"`
	// RelayMarker is the paused relay marker for ArmedGeneration, under
	// the bridge request RelayBridgeRequestID (its line printed once the
	// caller automation reads back PAUSED); empty while no relay scanner
	// is bound for the bridge.
	RelayMarker          string `json:"relay_marker"`
	RelayBridgeRequestID string `json:"relay_bridge_request_id"`
}

// PauseDueBindings is pause-due-bindings.json.
type PauseDueBindings struct {
	Header
	Entries []PauseDueEntry `json:"entries"`
}

// BindingEntry is the binding of a thread named in the revision's other
// files: the bridge resolves caller_automation_id here and checks that
// the binding is bound with the installation's transport and generation.
type BindingEntry struct {
	SourceThreadID            string     `json:"source_thread_id"`
	BindingID                 string     `json:"binding_id"`
	BindingState              string     `json:"binding_state"`
	CallerAutomationID        string     `json:"caller_automation_id"`
	BridgeThreadID            string     `json:"bridge_thread_id"`
	ReadTransport             string     `json:"read_transport"`
	ReadTransportGeneration   uint64     `json:"read_transport_generation"`
	ValidationFingerprint     string     `json:"validation_fingerprint"`
	ArmedGeneration           uint64     `json:"armed_generation"`
	ArmedGenerationQuiescedAt *time.Time `json:"armed_generation_quiesced_at"`
}

// Bindings is bindings.json.
type Bindings struct {
	Header
	Entries []BindingEntry `json:"entries"`
}

// InstallationState is the revision's copy of the installation state,
// the one a reader trusts. ObservedValidationFingerprint is what the
// publishing daemon's own cbth observes; AutomaticContinuation says
// whether the installation allows automatic continuation at all (read
// and writeback validated, fingerprints equal).
type InstallationState struct {
	Header
	ReadTransport                 string     `json:"read_transport"`
	ReadTransportGeneration       uint64     `json:"read_transport_generation"`
	ReadTransportCapability       string     `json:"read_transport_capability"`
	ArtifactReadCapability        string     `json:"artifact_read_capability"`
	WritebackCapability           string     `json:"writeback_capability"`
	ValidationFingerprint         string     `json:"validation_fingerprint"`
	ValidatedAt                   *time.Time `json:"validated_at"`
	UpdatedByBootstrapOrRepair    string     `json:"updated_by_bootstrap_or_repair"`
	ObservedValidationFingerprint string     `json:"observed_validation_fingerprint"`
	AutomaticContinuation         bool       `json:"automatic_continuation"`
	// WritebackTransport is the writeback transport heartbeats use: mcp,
	// relay, direct, or "" while none is validated (spec/desktop.md,
	// "Writeback transports").
	WritebackTransport string `json:"writeback_transport"`
}

// ---- reading ----

// Reader reads one inbox for one bridge thread. It holds no descriptor:
// each Read opens the inbox afresh.
type Reader struct {
	Dir    string // $CBTH_HOME/inbox
	Bridge string // the bridge thread id the caller expects
}

// Snapshot is a manifest checked against the bridge, with the root its
// files are read under.
type Snapshot struct {
	Manifest Manifest
	root     *os.Root
}

// Close releases the inbox.
func (s *Snapshot) Close() error { return s.root.Close() }

// Open reads and checks the manifest: schema, kind, bridge thread.
func (r Reader) Open() (*Snapshot, error) {
	if r.Bridge == "" {
		return nil, errs.New(errs.EINVAL, "bridge thread id is empty")
	}
	root, err := os.OpenRoot(r.Dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errs.Wrap(errs.ENOENT, err, "missing: no snapshot has been published (no inbox); the daemon publishes it")
		}
		return nil, errs.Wrap(errs.EACCES, err, "open the inbox")
	}
	var m Manifest
	if err := readJSON(root, ManifestName, &m); err != nil {
		root.Close()
		return nil, err
	}
	if err := check(m.Header, KindManifest, 0, r.Bridge, ManifestName); err != nil {
		root.Close()
		return nil, err
	}
	return &Snapshot{Manifest: m, root: root}, nil
}

// Fresh fails closed unless the manifest was confirmed current by now's
// standard: now before its fresh_until.
func (s *Snapshot) Fresh(now time.Time) error {
	if s.Manifest.FreshUntil.IsZero() || !now.Before(s.Manifest.FreshUntil) {
		return errs.New(errs.ESTALE, "stale: snapshot revision %d was last confirmed at %s and was fresh until %s; is the daemon running (cbth service status)?",
			s.Manifest.SnapshotRevision, s.Manifest.PublishedAt.Format(time.RFC3339), s.Manifest.FreshUntil.Format(time.RFC3339))
	}
	return nil
}

// ReadyThreads reads the revision's ready-threads.json.
func (s *Snapshot) ReadyThreads() (ReadyThreads, error) {
	var v ReadyThreads
	return v, s.read(s.Manifest.Files.ReadyThreads, KindReadyThreads, &v)
}

// ArmPending reads the revision's arm-pending-bindings.json.
func (s *Snapshot) ArmPending() (ArmPendingBindings, error) {
	var v ArmPendingBindings
	return v, s.read(s.Manifest.Files.ArmPendingBindings, KindArmPending, &v)
}

// ArmPendingList is the revision's arm-pending entries as the readers
// print them.
func (s *Snapshot) ArmPendingList() (List[ArmPendingEntry], error) {
	f, err := s.ArmPending()
	return List[ArmPendingEntry]{SnapshotRevision: f.SnapshotRevision, BridgeThreadID: f.BridgeThreadID, CreatedAt: f.CreatedAt, Entries: f.Entries}, err
}

// PauseDueList is the revision's pause-due entries as the readers print
// them.
func (s *Snapshot) PauseDueList() (List[PauseDueEntry], error) {
	f, err := s.PauseDue()
	return List[PauseDueEntry]{SnapshotRevision: f.SnapshotRevision, BridgeThreadID: f.BridgeThreadID, CreatedAt: f.CreatedAt, Entries: f.Entries}, err
}

// PauseDue reads the revision's pause-due-bindings.json.
func (s *Snapshot) PauseDue() (PauseDueBindings, error) {
	var v PauseDueBindings
	return v, s.read(s.Manifest.Files.PauseDueBindings, KindPauseDue, &v)
}

// Bindings reads the revision's bindings.json.
func (s *Snapshot) Bindings() (Bindings, error) {
	var v Bindings
	return v, s.read(s.Manifest.Files.Bindings, KindBindings, &v)
}

// Installation reads the revision's installation-state.json.
func (s *Snapshot) Installation() (InstallationState, error) {
	var v InstallationState
	return v, s.read(s.Manifest.Files.InstallationState, KindInstallation, &v)
}

type headed interface{ head() Header }

func (s *Snapshot) read(rel, kind string, v headed) error {
	if rel == "" || !filepath.IsLocal(rel) {
		return errs.New(errs.EACCES, "path_escapes_inbox: the manifest names %q, which is not a path inside the inbox", rel)
	}
	if err := readJSON(s.root, rel, v); err != nil {
		return err
	}
	return check(v.head(), kind, s.Manifest.SnapshotRevision, s.Manifest.BridgeThreadID, rel)
}

// check holds a file's header to the manifest: schema, kind, bridge
// thread and (rev non-zero) revision.
func check(h Header, kind string, rev uint64, bridge, name string) error {
	switch {
	case h.SchemaVersion != SchemaVersion:
		return errs.New(errs.EVERSION, "schema_version_mismatch: %s has schema version %d, this cbth reads %d", name, h.SchemaVersion, SchemaVersion)
	case h.Kind != kind:
		return errs.New(errs.ECORRUPT, "malformed: %s is a %q file, not %q", name, h.Kind, kind)
	case h.BridgeThreadID != bridge:
		return errs.New(errs.ESTALE, "bridge_thread_mismatch: %s is published for bridge thread %q, not %q (run `cbth desktop bridge-preflight --bridge-thread-id %s` outside the sandbox to publish for it)",
			name, h.BridgeThreadID, bridge, bridge)
	case rev != 0 && h.SnapshotRevision != rev:
		return errs.New(errs.ESTALE, "revision_mismatch: %s has revision %d, the manifest %d", name, h.SnapshotRevision, rev)
	}
	return nil
}

// readJSON reads one file (readFile) and decodes it whole.
func readJSON(root *os.Root, rel string, v any) error {
	b, err := readFile(root, rel)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errs.Wrap(errs.ECORRUPT, err, "malformed: %s", rel)
	}
	return nil
}

// readFile reads one file (openFile) whole.
func readFile(root *os.Root, rel string) ([]byte, error) {
	f, err := openFile(root, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, errs.Wrap(errs.EACCES, err, "read %s", rel)
	}
	if len(b) > MaxFileBytes {
		return nil, errs.New(errs.EFBIG, "oversized: %s grew past %d bytes", rel, MaxFileBytes)
	}
	return b, nil
}

// openFile opens one regular file of at most MaxFileBytes under root. No
// component of rel may be a symbolic link (the daemon writes none, so one
// is foreign; os.Root would refuse one leading out of the inbox anyway).
// It opens read-only and non-blocking, so a FIFO put in a file's place
// cannot hang it, and checks the descriptor is a regular file before
// anything is read.
func openFile(root *os.Root, rel string) (*os.File, error) {
	for p := rel; p != "."; p = filepath.Dir(p) {
		fi, err := root.Lstat(p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, errs.Wrap(errs.ENOENT, err, "missing: %s", rel)
			}
			return nil, errs.Wrap(errs.EACCES, err, "path_escapes_inbox: %s", rel)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil, errs.New(errs.EACCES, "path_escapes_inbox: %s goes through the symbolic link %s", rel, p)
		}
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errs.Wrap(errs.ENOENT, err, "missing: %s", rel)
		}
		return nil, errs.Wrap(errs.EACCES, err, "open %s", rel)
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		err = errs.Wrap(errs.EACCES, err, "stat %s", rel)
	case !fi.Mode().IsRegular():
		err = errs.New(errs.EACCES, "not_regular: %s is a %s, not a regular file", rel, fi.Mode().Type())
	case fi.Size() > MaxFileBytes:
		err = errs.New(errs.EFBIG, "oversized: %s is %d bytes, more than %d", rel, fi.Size(), MaxFileBytes)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// decodeHead decodes a file's header and, into first (when not nil), the
// first element of its entries, reading no further than it must: a
// heartbeat's claim needs one entry of a file that may hold thousands.
// The daemon writes the header before the entries; should a file put
// them after, the whole file is walked. ok reports an entry was found.
func decodeHead(r io.Reader, first any) (h Header, ok bool, err error) {
	dec := json.NewDecoder(r)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return h, false, fmt.Errorf("not a JSON object")
	}
	seen, entries := 0, false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return h, false, err
		}
		var dst any
		switch t {
		case "schema_version":
			dst = &h.SchemaVersion
		case "kind":
			dst = &h.Kind
		case "snapshot_revision":
			dst = &h.SnapshotRevision
		case "bridge_thread_id":
			dst = &h.BridgeThreadID
		case "created_at":
			dst = &h.CreatedAt
		case "entries":
			if t, err := dec.Token(); err != nil || t != json.Delim('[') {
				return h, false, fmt.Errorf("entries is not an array")
			}
			for dec.More() {
				var e any = &json.RawMessage{}
				if !ok && first != nil {
					e = first
				}
				if err := dec.Decode(e); err != nil {
					return h, false, err
				}
				ok, entries = true, true
				if seen == 5 {
					return h, ok, nil // the header is complete: stop here
				}
			}
			if _, err := dec.Token(); err != nil {
				return h, false, err
			}
			entries = true
			continue
		default:
			dst = &json.RawMessage{}
		}
		if err := dec.Decode(dst); err != nil {
			return h, false, err
		}
		if _, raw := dst.(*json.RawMessage); !raw {
			seen++
		}
		if seen == 5 && entries {
			return h, ok, nil
		}
	}
	return h, ok, nil
}

// head reads a file's header, and its first entry into first, and holds
// the header to the manifest.
func (s *Snapshot) head(rel, kind string, first any) (bool, error) {
	if rel == "" || !filepath.IsLocal(rel) {
		return false, errs.New(errs.EACCES, "path_escapes_inbox: the manifest names %q, which is not a path inside the inbox", rel)
	}
	f, err := openFile(s.root, rel)
	if err != nil {
		return false, err
	}
	defer f.Close()
	h, ok, err := decodeHead(io.LimitReader(f, MaxFileBytes), first)
	if err != nil {
		return false, errs.Wrap(errs.ECORRUPT, err, "malformed: %s", rel)
	}
	return ok, check(h, kind, s.Manifest.SnapshotRevision, s.Manifest.BridgeThreadID, rel)
}

// CheckAll holds the header of every file of the revision to the
// manifest: each present, regular, in the inbox, of the schema, bridge
// thread and revision the manifest says. It decodes no entries.
func (s *Snapshot) CheckAll() error {
	f := s.Manifest.Files
	for _, c := range []struct{ rel, kind string }{
		{f.ReadyThreads, KindReadyThreads}, {f.ArmPendingBindings, KindArmPending}, {f.PauseDueBindings, KindPauseDue},
		{f.Bindings, KindBindings}, {f.InstallationState, KindInstallation},
	} {
		if _, err := s.head(c.rel, c.kind, nil); err != nil {
			return err
		}
	}
	return nil
}

// ---- the read helpers' answers ----

// List is what list-arm-pending and list-pause-due print: the revision
// read and its entries.
type List[E any] struct {
	SnapshotRevision uint64    `json:"snapshot_revision"`
	BridgeThreadID   string    `json:"bridge_thread_id"`
	CreatedAt        time.Time `json:"created_at"`
	Entries          []E       `json:"entries"`
}

// Claim is what claim-next-ready prints: the first ready entry of the
// revision in fair order (a peek: nothing is reserved or moved), the
// binding the bridge arms it through, or null and why not.
type Claim struct {
	SnapshotRevision uint64        `json:"snapshot_revision"`
	BridgeThreadID   string        `json:"bridge_thread_id"`
	CreatedAt        time.Time     `json:"created_at"`
	Ready            *ReadyEntry   `json:"ready"`
	Binding          *BindingEntry `json:"binding"`
	// NotReadyReason is "" when Ready is set, else no_ready_thread,
	// automatic_continuation_off (the installation is not validated),
	// fingerprint_mismatch (this cbth is not the validated one) or
	// binding_missing.
	NotReadyReason string `json:"not_ready_reason"`
}

// Claim peeks at the first ready entry of the snapshot for a cbth whose
// fingerprint for the installation's transport is observed(transport).
// It decodes the first ready entry and the first binding only (the daemon
// lists the bindings in the ready order), unless that binding is not the
// entry's.
func (s *Snapshot) Claim(observed func(transport string) (string, error)) (Claim, error) {
	m := s.Manifest
	c := Claim{SnapshotRevision: m.SnapshotRevision, BridgeThreadID: m.BridgeThreadID, CreatedAt: m.CreatedAt}
	inst, err := s.Installation()
	if err != nil {
		return c, err
	}
	var e ReadyEntry
	found, err := s.head(m.Files.ReadyThreads, KindReadyThreads, &e)
	if err != nil {
		return c, err
	}
	var b BindingEntry
	if _, err := s.head(m.Files.Bindings, KindBindings, &b); err != nil {
		return c, err
	}
	fp, err := observed(inst.ReadTransport)
	if err != nil {
		return c, errs.Wrap(errs.EINTERNAL, err, "observe this cbth's validation fingerprint")
	}
	switch {
	case !inst.AutomaticContinuation:
		c.NotReadyReason = "automatic_continuation_off"
	case fp != inst.ValidationFingerprint:
		c.NotReadyReason = "fingerprint_mismatch"
	case !found:
		c.NotReadyReason = "no_ready_thread"
	case b.SourceThreadID == e.SourceThreadID:
		c.Ready, c.Binding = &e, &b
	default:
		all, err := s.Bindings()
		if err != nil {
			return c, err
		}
		for i := range all.Entries {
			if all.Entries[i].SourceThreadID == e.SourceThreadID {
				c.Ready, c.Binding = &e, &all.Entries[i]
				return c, nil
			}
		}
		c.NotReadyReason = "binding_missing"
	}
	return c, nil
}
