package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"path"
	"strconv"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// Files is the inbox directory as a publication writes it. The publisher
// decides what goes where and in which order; the adapter does the I/O:
// modes, temp files, fsync, rename. Paths are relative to the inbox
// directory, slash-separated.
type Files interface {
	// Path is rel's path on disk, for the people and readers told of it.
	Path(rel string) string
	// MkdirAll makes the directory rel and its parents.
	MkdirAll(rel string) error
	// Write replaces the file rel with data: a temp file in the same
	// directory, written, fsynced and renamed. The directory is left to
	// SyncDir, once for all the files written in it.
	Write(rel string, data []byte) error
	// SyncDir fsyncs the directory rel.
	SyncDir(rel string) error
	// Read reads the file rel.
	Read(rel string) ([]byte, error)
	// Exists reports whether rel exists (a link is not followed).
	Exists(rel string) bool
	// Dirs lists the names of the directories in rel.
	Dirs(rel string) []string
	// RemoveAll removes rel and everything below it.
	RemoveAll(rel string) error
}

// Publisher writes the Desktop snapshots: a file projection of the log
// with its own checkpoint, the manifest. A publication writes a new
// revision's files into snapshots/<revision>/ (each through a temp file,
// fsynced and renamed, the directory fsynced), then replaces the manifest
// the same way, last. Files of a revision never change afterwards. An
// unchanged log (and nothing fallen due) reuses the revision; a superseded
// revision is removed once it has been superseded for Retention, so a
// reader that read the manifest just before can still read its files.
//
// The publisher keeps its checkpoint only in the manifest and in memory:
// after a restart, or with the inbox deleted, the first publication
// writes everything again. Revision numbers, never reused, come from the
// log (Revisions): a deleted inbox does not take them back to 1.
type Publisher struct {
	Files Files // $CBTH_HOME/inbox
	// MaxAge is how long a manifest counts as fresh after the daemon last
	// confirmed it (fresh_until); Interval how often the daemon confirms.
	MaxAge, Interval, Retention time.Duration
	Log                         *slog.Logger
	// Revisions keeps the revision numbers in the log; nil: only what the
	// inbox shows (tests of the publisher alone).
	Revisions Revisions

	mu  sync.Mutex
	cur published
	// superseded records when each older revision stopped being current.
	superseded map[uint64]time.Time
	loaded     bool
	maxRev     uint64
	reserved   uint64 // the highest revision the log reserves (with Revisions)
	latestInst []byte // the installation state last written beside the manifest
}

// Revisions is where the publisher's revision numbers are kept beyond
// the inbox: the log. The publisher reserves them by blocks
// (RevisionBlock), so that it appends once per block, and a daemon that
// starts takes the block after the last one reserved: revisions only
// grow, whatever became of the inbox, and jump at each start.
type Revisions interface {
	// Reserved is the highest revision reserved (0: none).
	Reserved() (uint64, error)
	// Reserve reserves the revisions up to through.
	Reserve(through uint64) error
}

// RevisionBlock is how many revisions one reservation covers.
const RevisionBlock = 1000

// published is the revision in force and what it was built from.
type published struct {
	manifest inbox.Manifest
	hash     [32]byte
	head     uint64    // the log head its content reflects
	valid    time.Time // content.ValidUntil
	version  uint64    // content.Version
}

// PublishOutcome is what a publication did.
type PublishOutcome string

// The outcomes of Publish.
const (
	Published   PublishOutcome = "published" // a new revision
	Confirmed   PublishOutcome = "confirmed" // the manifest rewritten with a new published_at
	Unchanged   PublishOutcome = "unchanged" // nothing written
	NothingToDo PublishOutcome = "none"      // no installation or bridge yet
)

// Publication is the outcome of Publish.
type Publication struct {
	Outcome      PublishOutcome
	Manifest     inbox.Manifest
	ManifestPath string
}

// Current reports whether a publication at log head and now would find
// nothing to do: the same head, nothing fallen due, the manifest
// confirmed within Interval. The daemon calls it before building.
func (p *Publisher) Current(head uint64, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.cur
	return c.manifest.SnapshotRevision > 0 && c.head == head && (c.valid.IsZero() || now.Before(c.valid)) &&
		now.Before(c.manifest.PublishedAt.Add(p.Interval))
}

// Publish publishes content built at log head and now. confirm rewrites
// the manifest with published_at = now even when the content is that of
// the revision in force (bridge-preflight and the periodic confirmation).
func (p *Publisher) Publish(c Content, head uint64, now time.Time, confirm bool) (Publication, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loaded {
		if err := p.load(); err != nil {
			return Publication{}, err
		}
	}
	cur := &p.cur
	if c.Version != 0 && c.Version == cur.version && c.Bridge == cur.manifest.BridgeThreadID && p.intact() {
		// The builder says nothing changed since the content in force.
		return p.same(c, head, now, confirm, cur.hash)
	}
	// Each part is encoded once: for the comparison with the revision in
	// force and, if it differs, for the files.
	var parts [5][]byte
	for i, v := range []any{nonNil(c.Ready), nonNil(c.ArmPending), nonNil(c.PauseDue), nonNil(c.Bindings), c.Installation} {
		b, err := json.Marshal(v)
		if err != nil {
			return Publication{}, errs.Wrap(errs.EINTERNAL, err, "encode snapshot content")
		}
		parts[i] = b
	}
	h := sha256.New()
	h.Write([]byte(c.Bridge))
	for _, b := range parts {
		h.Write([]byte{0})
		h.Write(b)
	}
	var hash [32]byte
	h.Sum(hash[:0])
	if cur.manifest.SnapshotRevision > 0 && cur.hash == hash && p.intact() {
		return p.same(c, head, now, confirm, hash)
	}

	rev := p.maxRev + 1
	if p.Revisions != nil && rev > p.reserved {
		through := rev + RevisionBlock - 1
		if err := p.Revisions.Reserve(through); err != nil {
			return Publication{}, err
		}
		p.reserved = through
	}
	hdr := func(kind string) inbox.Header {
		return inbox.Header{SchemaVersion: inbox.SchemaVersion, Kind: kind, SnapshotRevision: rev, BridgeThreadID: c.Bridge, CreatedAt: now}
	}
	files := inbox.RevisionFiles(rev)
	type doc struct {
		inbox.Header
		Entries json.RawMessage `json:"entries"`
	}
	inst := c.Installation
	inst.Header = hdr(inbox.KindInstallation)
	docs := []struct {
		rel string
		v   any
	}{
		{files.ReadyThreads, doc{hdr(inbox.KindReadyThreads), parts[0]}},
		{files.ArmPendingBindings, doc{hdr(inbox.KindArmPending), parts[1]}},
		{files.PauseDueBindings, doc{hdr(inbox.KindPauseDue), parts[2]}},
		{files.Bindings, doc{hdr(inbox.KindBindings), parts[3]}},
		{files.InstallationState, inst},
	}
	dir := path.Join(inbox.SnapshotsDir, strconv.FormatUint(rev, 10))
	if err := p.Files.MkdirAll(dir); err != nil {
		return Publication{}, err
	}
	var instFile []byte
	for _, d := range docs {
		b, err := json.Marshal(d.v)
		if err != nil {
			return Publication{}, errs.Wrap(errs.EINTERNAL, err, "encode %s", d.rel)
		}
		b = append(b, '\n')
		instFile = b // the last one
		if err := p.Files.Write(d.rel, b); err != nil {
			return Publication{}, err
		}
	}
	for _, d := range []string{dir, inbox.SnapshotsDir} {
		if err := p.Files.SyncDir(d); err != nil {
			return Publication{}, err
		}
	}
	m := inbox.Manifest{Header: hdr(inbox.KindManifest), PublishedAt: now, FreshUntil: now.Add(p.MaxAge), LogSeq: head, Files: files}
	if err := p.writeManifest(m); err != nil {
		return Publication{}, err
	}
	// The latest installation state beside the manifest is a convenience
	// for people, written when it changed; readers trust the revision's
	// copy.
	if latest := inbox.LatestInstallationName; !bytes.Equal(parts[4], p.latestInst) || !p.Files.Exists(latest) {
		if err := p.writeAtomic(latest, instFile); err != nil {
			p.Log.Warn("write the latest installation state copy", "err", err)
		} else {
			p.latestInst = parts[4]
		}
	}
	if old := cur.manifest.SnapshotRevision; old > 0 {
		p.superseded[old] = now
	}
	*cur = published{manifest: m, hash: hash, head: head, valid: c.ValidUntil, version: c.Version}
	p.maxRev = rev
	p.prune(now)
	return p.result(Published), nil
}

// same keeps the revision in force for content c equal to its own:
// nothing written, unless confirm or snapshot_interval asks for a new
// published_at in the manifest.
func (p *Publisher) same(c Content, head uint64, now time.Time, confirm bool, hash [32]byte) (Publication, error) {
	cur := &p.cur
	cur.head, cur.valid, cur.version, cur.hash = head, c.ValidUntil, c.Version, hash
	if !confirm && now.Before(cur.manifest.PublishedAt.Add(p.Interval)) {
		return p.result(Unchanged), nil
	}
	m := cur.manifest
	m.PublishedAt, m.FreshUntil, m.LogSeq = now, now.Add(p.MaxAge), head
	if err := p.writeManifest(m); err != nil {
		return Publication{}, err
	}
	cur.manifest = m
	return p.result(Confirmed), nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (p *Publisher) result(outcome PublishOutcome) Publication {
	return Publication{Outcome: outcome, Manifest: p.cur.manifest, ManifestPath: p.Files.Path(inbox.ManifestName)}
}

// load finds where the last daemon left off: the highest revision it
// reserved in the log, the manifest in force and the highest revision
// ever written, so a revision number is never reused. A revision left
// behind counts as superseded now.
func (p *Publisher) load() error {
	p.superseded = map[uint64]time.Time{}
	if p.Revisions != nil {
		r, err := p.Revisions.Reserved()
		if err != nil {
			return err
		}
		p.maxRev, p.reserved = r, r
	}
	if err := p.Files.MkdirAll(inbox.SnapshotsDir); err != nil {
		return err
	}
	var m inbox.Manifest
	if b, err := p.Files.Read(inbox.ManifestName); err == nil && json.Unmarshal(b, &m) == nil {
		p.maxRev = max(p.maxRev, m.SnapshotRevision)
	}
	for _, rev := range p.revisions() {
		p.maxRev = max(p.maxRev, rev)
	}
	p.loaded = true
	return nil
}

// revisions lists the revision directories present.
func (p *Publisher) revisions() []uint64 {
	var out []uint64
	for _, name := range p.Files.Dirs(inbox.SnapshotsDir) {
		if rev, err := strconv.ParseUint(name, 10, 64); err == nil {
			out = append(out, rev)
		}
	}
	return out
}

// intact reports whether the revision in force is still on disk (someone
// may have deleted the inbox under a running daemon).
func (p *Publisher) intact() bool {
	f := p.cur.manifest.Files
	for _, rel := range []string{inbox.ManifestName, f.ReadyThreads, f.ArmPendingBindings, f.PauseDueBindings, f.Bindings, f.InstallationState} {
		if !p.Files.Exists(rel) {
			return false
		}
	}
	return true
}

func (p *Publisher) writeManifest(m inbox.Manifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "encode the manifest")
	}
	return p.writeAtomic(inbox.ManifestName, append(b, '\n'))
}

// prune removes revisions superseded for longer than Retention, and any
// directory left by a publication that never reached its manifest.
func (p *Publisher) prune(now time.Time) {
	cur := p.cur.manifest.SnapshotRevision
	for _, rev := range p.revisions() {
		if rev == cur {
			continue
		}
		at, ok := p.superseded[rev]
		if !ok {
			p.superseded[rev], at = now, now
		}
		if now.Sub(at) < p.Retention {
			continue
		}
		if err := p.Files.RemoveAll(path.Join(inbox.SnapshotsDir, strconv.FormatUint(rev, 10))); err != nil {
			p.Log.Warn("prune snapshot revision", "revision", rev, "err", err)
			continue
		}
		delete(p.superseded, rev)
	}
}

// writeAtomic replaces rel with data, durably: the file, then its
// directory.
func (p *Publisher) writeAtomic(rel string, data []byte) error {
	if err := p.Files.Write(rel, data); err != nil {
		return err
	}
	return p.Files.SyncDir(path.Dir(rel))
}
