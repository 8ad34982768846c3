// Package snapshot is the Desktop inbox's projection: what the snapshots
// the Desktop bridge reads hold (Content, Builder), and when and how a
// publication takes a new revision, confirms one or prunes old ones
// (Publisher). Package inbox is their file format and the sandbox-safe
// reader; the adapter hands the publisher the inbox directory's I/O
// (Files). spec/desktop.md is the contract.
package snapshot

import (
	"cmp"
	"slices"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// Fingerprints holds what the daemon's own cbth observes, per read
// transport: the observed validation fingerprint a snapshot shows.
type Fingerprints map[string]string

// Content is one publication's substance: everything but its revision
// and times. Two publications with equal Content share a revision.
type Content struct {
	Bridge       string
	Ready        []inbox.ReadyEntry
	ArmPending   []inbox.ArmPendingEntry
	PauseDue     []inbox.PauseDueEntry
	Bindings     []inbox.BindingEntry
	Installation inbox.InstallationState
	// ValidUntil is the earliest time at which the passage of time alone
	// could change the content (a back-off ending, a pause window
	// opening); zero if none.
	ValidUntil time.Time `json:"-"`
	// Version numbers the contents a Builder produced: equal (and
	// non-zero) only when nothing in them can differ, so the publisher
	// need not encode them to compare.
	Version uint64 `json:"-"`
}

// Build computes the content of a publication for the installation's
// bridge thread at now, from scratch. ok is false when there is nothing
// to publish: no installation state, or no bridge thread selected yet.
// It reads only.
func Build(s engine.Snapshot, cfg command.DeliveryConfig, now time.Time, fps Fingerprints) (c Content, ok bool, err error) {
	b := &Builder{Config: cfg, Fingerprints: fps}
	c, ok, err = b.Build(s, now, nil)
	c.Version = 0 // one build: nothing to compare with
	return c, ok, err
}

// Changes are the streams the log appended to after Since, up to and
// including seq Upto.
type Changes struct {
	Since, Upto uint64
	Streams     []events.StreamID
}

// Builder builds publication contents incrementally. It keeps each
// Desktop thread's part of the content (its ready or arm-pending entry
// and binding) and, given the streams appended to since its last build,
// reads again only the threads whose attempt, batch or binding changed:
// a publication after one event costs a few reads, not one per thread. A
// change of the installation state, a time a part was waiting for, or
// changes it cannot place make it build from scratch.
type Builder struct {
	Config       command.DeliveryConfig
	Fingerprints Fingerprints

	head    uint64 // the log seq the parts reflect; 0 for none
	instVer uint64 // the installation state's version then
	bridge  string
	valid   time.Time // the earliest wake of a part, zero for none
	parts   map[string]part
	owner   map[events.StreamID]string // attempt, batch and binding streams -> thread

	version  uint64   // of the last content assembled
	last     *Content // that content
	lastSeq  []string // the threads of its ready and arm-pending entries, in order
	rebuilds bool     // this build read some thread again or started over
}

// part is one thread's share of the content.
type part struct {
	ready      *inbox.ReadyEntry
	armPending *inbox.ArmPendingEntry
	binding    *aggregate.Binding
	wake       time.Time
}

// Since returns the log seq the builder's parts reflect (0: none), from
// which the caller collects the Changes of the next build.
func (b *Builder) Since() uint64 { return b.head }

// Build computes the content at now from snapshot s. With ch (the
// streams appended to since Since, up to s's checkpoint) it reads only
// the threads they touch; with ch nil it starts over.
func (b *Builder) Build(s engine.Snapshot, now time.Time, ch *Changes) (c Content, ok bool, err error) {
	inst, err := command.Installation(s)
	if err != nil || inst == nil || inst.BridgeThreadID == "" {
		b.head, b.last = 0, nil
		return c, false, err
	}
	c.Bridge = inst.BridgeThreadID
	observed := b.Fingerprints[inst.ReadTransport]
	c.Installation = installationState(inst, observed)
	threads, err := command.FairOrderScoped(s, command.TargetDesktop, command.DesktopCursorScope(c.Bridge))
	if err == nil {
		err = b.refresh(s, now, ch, threads, inst, observed)
	}
	if err != nil {
		b.head = 0
		return c, false, err
	}

	wake := func(t time.Time) {
		if !t.IsZero() && t.After(now) && (c.ValidUntil.IsZero() || t.Before(c.ValidUntil)) {
			c.ValidUntil = t
		}
	}
	bindings := map[string]*aggregate.Binding{}
	var seq []string
	for _, th := range threads {
		p, ok := b.parts[th]
		if !ok {
			continue
		}
		wake(p.wake)
		switch {
		case p.ready != nil:
			c.Ready = append(c.Ready, *p.ready)
			bindings[th] = p.binding
			seq = append(seq, th)
		case p.armPending != nil:
			c.ArmPending = append(c.ArmPending, *p.armPending)
			bindings[th] = p.binding
			seq = append(seq, th)
		}
	}
	b.valid = c.ValidUntil
	if c.PauseDue, err = pauseDue(s, now, c.Bridge, wake, bindings); err != nil {
		return c, false, err
	}

	// Nothing read again, the same threads in the same order, the same
	// pause-due bindings: the content is the last one, already assembled.
	if !b.rebuilds && b.last != nil && slices.Equal(seq, b.lastSeq) && slices.Equal(c.PauseDue, b.last.PauseDue) {
		last := *b.last
		last.ValidUntil = c.ValidUntil
		return last, true, nil
	}
	c.Bindings = bindingEntries(bindings, c.Ready)
	b.version++
	c.Version, b.lastSeq = b.version, seq
	b.last = &c
	return c, true, nil
}

// installationState is what a snapshot shows of the installation, with
// the fingerprint the running cbth observes.
func installationState(inst *aggregate.Installation, observed string) inbox.InstallationState {
	st := inbox.InstallationState{
		ReadTransport: inst.ReadTransport, ReadTransportGeneration: inst.ReadTransportGeneration,
		ReadTransportCapability: inst.ReadTransportCapability, ArtifactReadCapability: inst.ArtifactReadCapability,
		WritebackCapability: inst.WritebackCapability, ValidationFingerprint: inst.ValidationFingerprint,
		UpdatedByBootstrapOrRepair: inst.UpdatedBy, ObservedValidationFingerprint: observed,
		AutomaticContinuation: inst.AutomaticContinuation(observed),
		WritebackTransport:    inst.WritebackTransport(),
	}
	if !inst.ValidatedAt.IsZero() {
		at := inst.ValidatedAt
		st.ValidatedAt = &at
	}
	return st
}

// refresh brings the parts up to date for threads, the Desktop fair
// order: with ch, and nothing since the last build that it cannot place,
// only the threads whose attempt, batch or binding changed; otherwise
// every thread, from scratch. It records how far the parts reflect the
// log.
func (b *Builder) refresh(s engine.Snapshot, now time.Time, ch *Changes, threads []string, inst *aggregate.Installation, observed string) error {
	incremental := ch != nil && b.head != 0 && ch.Since == b.head && inst.Version == b.instVer && inst.BridgeThreadID == b.bridge &&
		(b.valid.IsZero() || now.Before(b.valid)) && len(b.owner) < 4*(len(threads)+1024)
	b.rebuilds = !incremental
	if incremental {
		dirty := map[string]bool{}
		for _, sid := range ch.Streams {
			switch sid.Kind {
			case events.KindAttempt, events.KindBatch, events.KindBinding:
				th, known := b.owner[sid]
				if !known {
					var err error
					if th, err = threadOf(s, sid); err != nil {
						return err
					}
					b.owner[sid] = th
				}
				if th != "" {
					dirty[th] = true
				}
			}
		}
		b.rebuilds = len(dirty) > 0
		for th := range dirty {
			if err := b.place(s, now, th, inst, observed); err != nil {
				return err
			}
		}
	} else {
		b.parts, b.owner = map[string]part{}, map[events.StreamID]string{}
		for _, th := range threads {
			if err := b.place(s, now, th, inst, observed); err != nil {
				return err
			}
		}
	}
	b.head, b.instVer, b.bridge = s.Checkpoint(), inst.Version, inst.BridgeThreadID
	if ch != nil && ch.Upto > b.head {
		b.head = ch.Upto
	}
	return nil
}

// pauseDue lists the bindings of bridge armed for a generation not yet
// quiesced whose pause window has opened, those past their deadline
// first, and adds each to bindings; wake hears of the times at which
// the list changes by itself. They are few: read afresh every time.
func pauseDue(s engine.Snapshot, now time.Time, bridge string, wake func(time.Time), bindings map[string]*aggregate.Binding) ([]inbox.PauseDueEntry, error) {
	var out []inbox.PauseDueEntry
	for _, r := range s.Scan(index.BindingUnquiesced, "") {
		bd, err := engine.Binding(s, r.ID)
		if err != nil {
			return nil, err
		}
		if bd == nil || !bd.Unquiesced() || !bd.ServesBridge(bridge) {
			continue
		}
		if now.Before(bd.PauseNotBefore) {
			wake(bd.PauseNotBefore)
			continue
		}
		wake(bd.PauseDeadline)
		bindings[bd.SourceThreadID] = bd
		var expires time.Time
		marker, request := relayMarker(bd.RelayMarkers, now, &expires, bridge, func(m aggregate.RelayMarker) bool {
			return m.Kind == aggregate.RelayPaused && m.AttemptID == "" && m.Generation == bd.ArmedGeneration
		})
		wake(expires)
		out = append(out, inbox.PauseDueEntry{SourceThreadID: bd.SourceThreadID, BindingID: bd.ID,
			BindingState: string(bd.State), CallerAutomationID: bd.CallerAutomationID, ArmedGeneration: bd.ArmedGeneration,
			PauseNotBefore: bd.PauseNotBefore, PauseDeadline: bd.PauseDeadline,
			Overdue: !bd.PauseDeadline.IsZero() && !now.Before(bd.PauseDeadline), RelayMarker: marker, RelayBridgeRequestID: request})
	}
	// The bridge's reconciliation handles every binding past its pause
	// deadline first.
	slices.SortStableFunc(out, func(a, b inbox.PauseDueEntry) int {
		if a.Overdue != b.Overdue {
			if a.Overdue {
				return -1
			}
			return 1
		}
		return cmp.Or(a.PauseDeadline.Compare(b.PauseDeadline), cmp.Compare(a.SourceThreadID, b.SourceThreadID))
	})
	return out, nil
}

// bindingEntries are the snapshot's bindings: those of the ready threads
// first, in the ready order, so a claim finds the first ready thread's
// binding first; the rest by thread.
func bindingEntries(bindings map[string]*aggregate.Binding, ready []inbox.ReadyEntry) []inbox.BindingEntry {
	var out []inbox.BindingEntry
	for th, bd := range bindings {
		e := inbox.BindingEntry{SourceThreadID: th, BindingID: bd.ID, BindingState: string(bd.State),
			CallerAutomationID: bd.CallerAutomationID, BridgeThreadID: bd.BridgeThreadID,
			ReadTransport: bd.Mirror.ReadTransport, ReadTransportGeneration: bd.Mirror.ReadTransportGeneration,
			ValidationFingerprint: bd.Mirror.ValidationFingerprint, ArmedGeneration: bd.ArmedGeneration}
		if !bd.ArmedGenerationQuiesced.IsZero() {
			at := bd.ArmedGenerationQuiesced
			e.ArmedGenerationQuiescedAt = &at
		}
		out = append(out, e)
	}
	rank := make(map[string]int, len(ready))
	for i, e := range ready {
		rank[e.SourceThreadID] = i
	}
	slices.SortFunc(out, func(a, b inbox.BindingEntry) int {
		ra, oka := rank[a.SourceThreadID]
		rb, okb := rank[b.SourceThreadID]
		switch {
		case oka && okb:
			return cmp.Compare(ra, rb)
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.SourceThreadID, b.SourceThreadID)
	})
	return out
}

// place reads one thread again and keeps its part: a ready entry when
// its head's attempt is prepared and every gate lets it through, an
// arm-pending entry when the bridge marked its attempt arm_pending, or
// none. Each state is read once; this runs for every changed thread.
func (b *Builder) place(s engine.Reader, now time.Time, th string, inst *aggregate.Installation, observed string) error {
	delete(b.parts, th)
	a, err := liveAttempt(s, th)
	if err != nil || a == nil {
		return err
	}
	b.owner[events.StreamID{Kind: events.KindAttempt, ID: a.ID}] = th
	if a.State != fsm.AttemptPrepared && a.State != fsm.AttemptArmPending {
		return nil
	}
	bd, err := command.BindingOf(s, th)
	if err != nil || bd == nil {
		return err
	}
	b.owner[events.StreamID{Kind: events.KindBinding, ID: bd.ID}] = th
	if !bd.ServesBridge(inst.BridgeThreadID) {
		return nil
	}
	bt, err := engine.Batch(s, a.BatchID)
	if err != nil {
		return err
	}
	if bt == nil || bt.TargetKind != command.TargetDesktop || !bt.Open() || bt.HeadAttemptID != a.ID {
		return nil
	}
	b.owner[events.StreamID{Kind: events.KindBatch, ID: bt.ID}] = th
	if a.State == fsm.AttemptArmPending {
		var wake time.Time
		accepted, _ := relayMarker(a.RelayMarkers, now, &wake, inst.BridgeThreadID, func(m aggregate.RelayMarker) bool {
			return m.Kind == aggregate.RelayArmAccepted && m.BridgeRequestID == a.BridgeRequestID
		})
		paused, _ := relayMarker(bd.RelayMarkers, now, &wake, inst.BridgeThreadID, func(m aggregate.RelayMarker) bool {
			return m.Kind == aggregate.RelayPaused && m.AttemptID == a.ID && m.Generation == a.Generation && m.BridgeRequestID == a.BridgeRequestID
		})
		b.parts[th] = part{binding: bd, wake: wake, armPending: &inbox.ArmPendingEntry{SourceThreadID: th, BatchID: a.BatchID, AttemptID: a.ID,
			Generation: a.Generation, SnapshotRevision: a.SnapshotRevision, CallerAutomationID: bd.CallerAutomationID,
			BridgeRequestID: a.BridgeRequestID, ArmPendingSince: a.ArmPendingSince, ArmPendingDeadline: a.ArmPendingDeadline,
			BridgeArmLeaseDeadline: a.BridgeArmLeaseDeadline, RelayMarker: accepted, RelayPausedMarker: paused}}
		return nil
	}
	if reason, at := b.Config.BatchHold(bt, now); reason != "" {
		b.parts[th] = part{wake: at}
		return nil
	}
	g := aggregate.DesktopGate(now, bt, bd, inst, observed)
	if !g.OK {
		b.parts[th] = part{wake: g.Wake}
		return nil
	}
	wake := g.Wake
	marker, request := relayMarker(a.RelayMarkers, now, &wake, inst.BridgeThreadID, func(m aggregate.RelayMarker) bool { return m.Kind == aggregate.RelayArmPending })
	b.parts[th] = part{binding: bd, wake: wake, ready: &inbox.ReadyEntry{SourceThreadID: th, BatchID: a.BatchID,
		AttemptID: a.ID, Generation: a.Generation, SnapshotRevision: a.SnapshotRevision, SnapshotPath: inbox.ByThreadPath(th),
		RequiresArtifactRead: bt.RequiresArtifactRead, RelayMarker: marker, RelayBridgeRequestID: request}}
	return nil
}

// relayMarker returns the newest marker in ms issued for bridge that
// match accepts and may still be consumed at now, and its bridge request
// ("" if none): a marker of another bridge would only ever be refused by
// this one's scanner. Its expiry becomes a wake (the marker must leave
// the snapshot when it expires). The snapshot publishes markers, never
// their lines.
func relayMarker(ms []aggregate.RelayMarker, now time.Time, wake *time.Time, bridge string, match func(aggregate.RelayMarker) bool) (marker, request string) {
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		if m.BridgeThreadID != bridge || !match(m) || !m.Valid(now) {
			continue
		}
		if wake.IsZero() || m.ExpiresAt.Before(*wake) {
			*wake = m.ExpiresAt
		}
		return m.Marker, m.BridgeRequestID
	}
	return "", ""
}

// threadOf returns the thread of an attempt, batch or binding stream.
func threadOf(s engine.Reader, sid events.StreamID) (string, error) {
	switch sid.Kind {
	case events.KindAttempt:
		a, err := engine.Attempt(s, sid.ID)
		if a == nil {
			return "", err
		}
		return a.SourceThreadID, err
	case events.KindBatch:
		b, err := engine.Batch(s, sid.ID)
		if b == nil {
			return "", err
		}
		return b.SourceThreadID, err
	case events.KindBinding:
		b, err := engine.Binding(s, sid.ID)
		if b == nil {
			return "", err
		}
		return b.SourceThreadID, err
	}
	return "", nil
}

// liveAttempt returns the thread's non-terminal attempt, if any.
func liveAttempt(s engine.Reader, thread string) (*aggregate.Attempt, error) {
	refs := s.Lookup(index.ThreadLive, thread)
	if len(refs) == 0 {
		return nil, nil
	}
	return engine.Attempt(s, refs[0].ID)
}
