package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/desktop/inbox"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/errs"
)

// The Desktop helpers a bridge heartbeat runs inside Codex Desktop's
// sandbox, which lets it read the home's files and nothing more: no
// chmod, no write, no lock, no socket, no log. list-arm-pending,
// list-pause-due and claim-next-ready, and bridge-preflight's fallback,
// therefore do nothing but resolve the home's path and read the published
// inbox through package inbox: no home setup, no configuration, no
// daemon. The sandbox test traces their system calls to prove it.

// readSnapshot opens the published snapshot for bridge.
func readSnapshot(env *Env, bridge string) (*inbox.Snapshot, error) {
	h, err := env.Home()
	if err != nil {
		return nil, err
	}
	return inbox.Reader{Dir: h.Inbox(), Bridge: bridge}.Open()
}

// DesktopListArmPendingCmd is `cbth desktop list-arm-pending`.
type DesktopListArmPendingCmd struct {
	BridgeThreadID string `help:"The bridge thread." required:"" name:"bridge-thread-id"`
}

// Run reads arm-pending-bindings.json of the current revision.
func (c *DesktopListArmPendingCmd) Run(env *Env) error {
	s, err := readSnapshot(env, c.BridgeThreadID)
	if err != nil {
		return err
	}
	defer s.Close()
	f, err := s.ArmPending()
	if err != nil {
		return err
	}
	out := inbox.List[inbox.ArmPendingEntry]{SnapshotRevision: f.SnapshotRevision, BridgeThreadID: f.BridgeThreadID, CreatedAt: f.CreatedAt, Entries: f.Entries}
	return env.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "revision %d: %d arm-pending\n", out.SnapshotRevision, len(out.Entries))
		for _, e := range out.Entries {
			fmt.Fprintf(w, "  %s attempt %s generation %d request %s until %s\n", e.SourceThreadID, e.AttemptID, e.Generation, e.BridgeRequestID, e.ArmPendingDeadline.Format(time.RFC3339))
		}
	})
}

// DesktopListPauseDueCmd is `cbth desktop list-pause-due`.
type DesktopListPauseDueCmd struct {
	BridgeThreadID string `help:"The bridge thread." required:"" name:"bridge-thread-id"`
}

// Run reads pause-due-bindings.json of the current revision.
func (c *DesktopListPauseDueCmd) Run(env *Env) error {
	s, err := readSnapshot(env, c.BridgeThreadID)
	if err != nil {
		return err
	}
	defer s.Close()
	f, err := s.PauseDue()
	if err != nil {
		return err
	}
	out := inbox.List[inbox.PauseDueEntry]{SnapshotRevision: f.SnapshotRevision, BridgeThreadID: f.BridgeThreadID, CreatedAt: f.CreatedAt, Entries: f.Entries}
	return env.emit(out, func(w io.Writer) {
		fmt.Fprintf(w, "revision %d: %d pause-due\n", out.SnapshotRevision, len(out.Entries))
		for _, e := range out.Entries {
			fmt.Fprintf(w, "  %s automation %s generation %d overdue %t\n", e.SourceThreadID, e.CallerAutomationID, e.ArmedGeneration, e.Overdue)
		}
	})
}

// DesktopClaimNextReadyCmd is `cbth desktop claim-next-ready`.
type DesktopClaimNextReadyCmd struct {
	BridgeThreadID string `help:"The bridge thread." required:"" name:"bridge-thread-id"`
}

// Run peeks at the first ready entry of the current revision.
func (c *DesktopClaimNextReadyCmd) Run(env *Env) error {
	s, err := readSnapshot(env, c.BridgeThreadID)
	if err != nil {
		return err
	}
	defer s.Close()
	out, err := s.Claim(func(t string) (string, error) { return inbox.Observe(Version, t) })
	if err != nil {
		return err
	}
	return env.emit(out, func(w io.Writer) {
		if out.Ready == nil {
			fmt.Fprintf(w, "revision %d: nothing ready (%s)\n", out.SnapshotRevision, out.NotReadyReason)
			return
		}
		r := out.Ready
		fmt.Fprintf(w, "revision %d: thread %s batch %s attempt %s generation %d snapshot_revision %d via automation %s\n",
			out.SnapshotRevision, r.SourceThreadID, r.BatchID, r.AttemptID, r.Generation, r.SnapshotRevision, out.Binding.CallerAutomationID)
	})
}

// DesktopPreflightCmd is `cbth desktop bridge-preflight`.
type DesktopPreflightCmd struct {
	BridgeThreadID string `help:"The bridge thread." required:"" name:"bridge-thread-id"`
}

// Run does the seed's preflight through the daemon when it can reach one
// (starting it if none runs and this process may: it can open the
// start-up lock). In a sandbox that refuses the socket or the lock it
// falls back to checking the published manifest: fresh, for this bridge,
// every file of its revision consistent; and fails closed otherwise.
func (c *DesktopPreflightCmd) Run(env *Env) error {
	h, err := env.Home()
	if err != nil {
		return err
	}
	cl, err := ipc.Dial(h.Socket(), Version)
	switch {
	case err == nil:
	case ipc.Absent(err) && mayStart(h):
		if cl, err = env.Client(); err != nil {
			return err
		}
	case ipc.Absent(err) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES):
		return c.fallback(env, h, err)
	default:
		return errs.Wrap(errs.EHOSTDOWN, err, "connect to %s", h.Socket())
	}
	defer cl.Close()
	fps, err := observedFingerprints()
	if err != nil {
		return err
	}
	rep, err := api.DesktopPreflight.Call(cl, api.PreflightArgs{BridgeThreadID: c.BridgeThreadID, Fingerprints: fps})
	if err != nil {
		return err
	}
	return env.emit(rep, func(w io.Writer) { printPreflight(w, rep) })
}

// mayStart reports whether this process could start a daemon: it can
// open the start-up lock (or the home is not set up yet). A heartbeat's
// sandbox refuses that open.
func mayStart(h home.Home) bool {
	f, err := os.OpenFile(h.Lock(), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, home.FileMode)
	if err == nil {
		f.Close()
		return true
	}
	return errors.Is(err, fs.ErrNotExist)
}

// fallback is the sandbox half of bridge-preflight: a pure reader.
func (c *DesktopPreflightCmd) fallback(env *Env, h home.Home, why error) error {
	s, err := inbox.Reader{Dir: h.Inbox(), Bridge: c.BridgeThreadID}.Open()
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Fresh(time.Now()); err != nil {
		return err
	}
	if err := s.CheckAll(); err != nil {
		return err
	}
	inst, err := s.Installation()
	if err != nil {
		return err
	}
	fp, err := inbox.Observe(Version, inst.ReadTransport)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "observe this cbth's validation fingerprint")
	}
	m := s.Manifest
	rep := api.PreflightReply{Outcome: "fresh", Source: "snapshot", SnapshotManifestPath: filepath.Join(h.Inbox(), inbox.ManifestName),
		SnapshotRevision: m.SnapshotRevision, BridgeThreadID: m.BridgeThreadID, PublishedAt: m.PublishedAt, FreshUntil: m.FreshUntil,
		ReadTransport: inst.ReadTransport, ReadTransportGeneration: inst.ReadTransportGeneration,
		AutomaticContinuation: inst.AutomaticContinuation && fp == inst.ValidationFingerprint, FallbackReason: why.Error()}
	return env.emit(rep, func(w io.Writer) { printPreflight(w, rep) })
}

func printPreflight(w io.Writer, r api.PreflightReply) {
	fmt.Fprintf(w, "snapshot revision %d for bridge %s (%s, from the %s)\n", r.SnapshotRevision, r.BridgeThreadID, r.Outcome, r.Source)
	fmt.Fprintf(w, "manifest %s, fresh until %s\n", r.SnapshotManifestPath, r.FreshUntil.Local().Format(time.RFC3339))
	fmt.Fprintf(w, "automatic continuation %t\n", r.AutomaticContinuation)
	if r.FallbackReason != "" {
		fmt.Fprintf(w, "the daemon was not reachable: %s\n", r.FallbackReason)
	}
}
