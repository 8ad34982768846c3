// Package desktop is the Codex Desktop delivery target: a pull target
// whose heads the scheduler only prepares (Target), and the inbox
// directory the daemon publishes the bridge's snapshots into
// (InboxFiles). What the snapshots hold and when a publication takes a
// new revision is the projection's (projections/snapshot); package
// inbox is their format and the sandbox-safe reader. spec/desktop.md is
// the contract.
package desktop

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	desktopcmd "github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections/inbox"
	"github.com/cbth-dev/cbth/projections/snapshot"
)

// ObserveFingerprints computes the running cbth's fingerprint for each
// read transport.
func ObserveFingerprints(version string) (snapshot.Fingerprints, error) {
	fp := snapshot.Fingerprints{}
	for _, t := range desktopcmd.ReadTransports {
		f, err := inbox.Observe(version, t)
		if err != nil {
			return nil, err
		}
		fp[t] = f
	}
	return fp, nil
}

// Target is the Desktop pull target. Its gate is desktopcmd.DesktopGate on
// the daemon's current state: the head is prepared for a heartbeat to
// move on. While the queue writeback transport is in use it is
// desktopcmd.QueueGate instead, and the scheduler hands the head to
// Codex's queue through Prepare's send, as for a push target.
type Target struct {
	// Read runs fn on a consistent snapshot of the daemon's state.
	Read         func(fn func(engine.Snapshot) error) error
	Now          func() time.Time
	Fingerprints snapshot.Fingerprints
	// Queue is the queue writeback transport (nil: this daemon cannot
	// run it).
	Queue *Queue
}

// Spec implements target.Target.
func (t *Target) Spec() target.Spec {
	return target.Spec{Name: string(command.TargetDesktop), Kind: target.Pull, DeliveryMode: command.ModeDesktop}
}

// Gate implements target.Target.
func (t *Target) Gate(_ context.Context, h target.Head) target.Gate {
	var g target.Gate
	err := t.Read(func(s engine.Snapshot) error {
		b, err := engine.Batch(s, h.BatchID)
		if err != nil {
			return err
		}
		if b == nil {
			g.Reason = "no batch " + h.BatchID
			return nil
		}
		inst, err := command.Installation(s)
		if err != nil {
			return err
		}
		bd, err := command.BindingOf(s, b.SourceThreadID)
		if err != nil {
			return err
		}
		// The queue's gate for a head it takes, and for a binding no
		// heartbeat can serve (it names no caller automation), so that its
		// reason names what the queue needs.
		queueOnly := bd != nil && bd.State != fsm.BindingUnbound && bd.CallerAutomationID == ""
		if inst != nil && (inst.WritebackTransport() == desktopcmd.WritebackQueue || queueOnly) {
			if why := t.Queue.unavailable(); why != "" {
				g.Reason = why
				return nil
			}
			observed := t.observed(s)
			r, err := desktopcmd.QueueGate(s, b, observed, t.Queue.Command.CodexHome, t.Queue.HomeTrust, t.Queue.TrustOf)
			g.OK, g.Park, g.Reason = r.OK, r.Park, r.Reason
			if r.OK {
				g.Route = t.Queue.route(b.ID, observed)
			}
			return err
		}
		r, err := desktopcmd.DesktopGate(s, t.Now(), b, t.observed(s))
		g.OK, g.Park, g.Reason, g.Retry = r.OK, r.Park, r.Reason, r.Wake
		return err
	})
	if err != nil {
		return target.Gate{Reason: "desktop gate: " + err.Error()}
	}
	return g
}

// Prepare implements target.Preparer: a head the queue gate let through
// gets its send once the thread's rollout is read (Queue.prepare); a head
// for a heartbeat is only prepared, as before.
func (t *Target) Prepare(_ context.Context, h target.Head, g target.Gate) target.Gate {
	if g.Route.DeliveryMode != command.ModeDesktopQueue || t.Queue == nil {
		return g
	}
	return t.Queue.prepare(h, g, t.Now())
}

var _ target.Preparer = (*Target)(nil)

// observed is the daemon's fingerprint for the installation's transport.
func (t *Target) observed(r engine.Reader) string {
	inst, err := command.Installation(r)
	if err != nil || inst == nil {
		return ""
	}
	return t.Fingerprints[inst.ReadTransport]
}

// InboxFiles is $CBTH_HOME/inbox as the snapshot publisher writes it
// (snapshot.Files): directories 0700 and owned by the user, files 0600
// written through a temp file, fsynced and renamed.
type InboxFiles struct {
	Dir string
	// NoSync skips the fsyncs: for tests that must not wait on the disk.
	NoSync bool
}

var _ snapshot.Files = InboxFiles{}

func (f InboxFiles) abs(rel string) string { return filepath.Join(f.Dir, filepath.FromSlash(rel)) }

// Path implements snapshot.Files.
func (f InboxFiles) Path(rel string) string { return f.abs(rel) }

// MkdirAll implements snapshot.Files.
func (f InboxFiles) MkdirAll(rel string) error { return home.EnsureDir(f.abs(rel)) }

// SyncDir implements snapshot.Files.
func (f InboxFiles) SyncDir(rel string) error {
	if f.NoSync {
		return nil
	}
	if err := home.SyncDir(f.abs(rel)); err != nil {
		return errs.IO(err, "sync %s", f.abs(rel))
	}
	return nil
}

// Read implements snapshot.Files.
func (f InboxFiles) Read(rel string) ([]byte, error) { return os.ReadFile(f.abs(rel)) }

// Exists implements snapshot.Files.
func (f InboxFiles) Exists(rel string) bool {
	_, err := os.Lstat(f.abs(rel))
	return err == nil
}

// Dirs implements snapshot.Files.
func (f InboxFiles) Dirs(rel string) []string {
	ents, err := os.ReadDir(f.abs(rel))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// RemoveAll implements snapshot.Files.
func (f InboxFiles) RemoveAll(rel string) error { return os.RemoveAll(f.abs(rel)) }

// Write implements snapshot.Files: a 0600 temp file in the same
// directory, written, fsynced, renamed. The caller fsyncs the directory
// once for all its files.
func (f InboxFiles) Write(rel string, data []byte) error {
	path := f.abs(rel)
	t, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return errs.IO(err, "write %s", path)
	}
	tmp := t.Name()
	defer os.Remove(tmp)
	if err := t.Chmod(home.FileMode); err != nil {
		t.Close()
		return errs.IO(err, "write %s", path)
	}
	if _, err := t.Write(data); err != nil {
		t.Close()
		return errs.IO(err, "write %s", path)
	}
	if !f.NoSync {
		if err := t.Sync(); err != nil {
			t.Close()
			return errs.IO(err, "sync %s", path)
		}
	}
	if err := t.Close(); err != nil {
		return errs.IO(err, "close %s", path)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errs.IO(err, "rename %s", path)
	}
	return nil
}
