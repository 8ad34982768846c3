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

	"github.com/cbth-dev/cbth/adapters/desktop/relay"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// The Desktop helpers a bridge heartbeat runs inside Codex Desktop's
// sandbox, which lets it read the home's files and nothing more: no
// chmod, no write, no lock, no socket, no log. list-arm-pending,
// list-pause-due, claim-next-ready and relay print, and
// bridge-preflight's fallback, therefore do nothing but resolve the
// home's path and read the published inbox through package inbox: no
// home setup, no configuration, no daemon. The sandbox test traces their
// system calls to prove it.

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
	out, err := s.ArmPendingList()
	if err != nil {
		return err
	}
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
	out, err := s.PauseDueList()
	if err != nil {
		return err
	}
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

// DesktopRelayPrintCmd is `cbth desktop relay print`: the one way a
// sandboxed bridge writes back. The snapshot publishes relay markers,
// never relay lines, so reading or showing a file applies nothing; this
// composes the line of one marker from the current revision's files and
// prints it, alone, and that output in the bridge thread's rollout is
// what the scanner applies. Running it is the decision.
type DesktopRelayPrintCmd struct {
	BridgeThreadID string `help:"The bridge thread." required:"" name:"bridge-thread-id"`
	Kind           string `help:"What the line stands for: arm-pending (a ready entry's .relay_marker: about to arm), arm-accepted (an arm-pending entry's .relay_marker: the caller automation was armed) or paused (an arm-pending entry's .relay_paused_marker, or a pause-due entry's .relay_marker: the caller automation reads back PAUSED)." required:"" enum:"arm-pending,arm-accepted,paused"`
	Marker         string `help:"The marker, from the entry of the current revision." required:""`
}

// RelayPrinted is relay print's --json answer: the envelope described,
// which is not a relay line (only the plain output is).
type RelayPrinted struct {
	SnapshotRevision uint64 `json:"snapshot_revision"`
	relay.Envelope
}

// Run prints the line.
func (c *DesktopRelayPrintCmd) Run(env *Env) error {
	s, err := readSnapshot(env, c.BridgeThreadID)
	if err != nil {
		return err
	}
	defer s.Close()
	e, err := publishedEnvelope(s, c.Marker)
	if err != nil {
		return err
	}
	if e.Kind != c.Kind {
		return errs.New(errs.EINVAL, "kind_mismatch: marker %s is the %s marker of thread %s, not %s", c.Marker, e.Kind, e.SourceThreadID, c.Kind)
	}
	return env.emit(RelayPrinted{SnapshotRevision: s.Manifest.SnapshotRevision, Envelope: e}, func(w io.Writer) { fmt.Fprintln(w, relay.Line(e)) })
}

// publishedEnvelope finds marker in the current revision's ready,
// arm-pending and pause-due entries and returns the envelope its line
// carries: the entry's token and the marker's kind and request.
func publishedEnvelope(s *inbox.Snapshot, marker string) (relay.Envelope, error) {
	if marker == "" {
		return relay.Envelope{}, errs.New(errs.EINVAL, "the marker is empty")
	}
	ready, err := s.ReadyThreads()
	if err != nil {
		return relay.Envelope{}, err
	}
	for _, e := range ready.Entries {
		if e.RelayMarker == marker {
			return relay.Envelope{Marker: marker, Kind: relay.KindArmPending, SourceThreadID: e.SourceThreadID, AttemptID: e.AttemptID,
				Generation: e.Generation, BridgeRequestID: e.RelayBridgeRequestID}, nil
		}
	}
	pending, err := s.ArmPending()
	if err != nil {
		return relay.Envelope{}, err
	}
	for _, e := range pending.Entries {
		env := relay.Envelope{Marker: marker, SourceThreadID: e.SourceThreadID, AttemptID: e.AttemptID, Generation: e.Generation,
			BridgeRequestID: e.BridgeRequestID}
		switch marker {
		case e.RelayMarker:
			env.Kind = relay.KindArmAccepted
			return env, nil
		case e.RelayPausedMarker:
			env.Kind = relay.KindPaused
			return env, nil
		}
	}
	due, err := s.PauseDue()
	if err != nil {
		return relay.Envelope{}, err
	}
	for _, e := range due.Entries {
		if e.RelayMarker == marker {
			return relay.Envelope{Marker: marker, Kind: relay.KindPaused, SourceThreadID: e.SourceThreadID, Generation: e.ArmedGeneration,
				BridgeRequestID: e.RelayBridgeRequestID}, nil
		}
	}
	return relay.Envelope{}, errs.New(errs.ESTALE, "marker_not_published: revision %d carries no marker %s (it was consumed, expired or its entry moved on: read the snapshot again)",
		s.Manifest.SnapshotRevision, marker)
}
