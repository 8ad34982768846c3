package desktopmod

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/artifact"
	"github.com/cbth-dev/cbth/adapters/desktop/relay"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	desktopcmd "github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The transcript relay's daemon side (spec/desktop.md, "The transcript
// relay"): markers, the scanner bindings, the scanner that follows each
// bound rollout file, and the one-shot consume-transcript.

// Scan limits per rollout and tick (the research notes, upstream-facts
// B7): at most 256 complete records, none starting past 1 MiB, never
// past the end captured when the tick starts; a record is read whole up
// to relay.MaxRecord, and a longer one read through and skipped.
var scanLimits = relay.Limits{Records: 256, Bytes: 1 << 20, Record: relay.MaxRecord}

// maxTranscript bounds what consume-transcript reads of one file.
const maxTranscript = 256 << 20

// scanCursor is how far the scanner has read one bound rollout. It
// starts at the position the log records for the binding
// (installation.relay_scanner_advanced) and is recorded again after a
// round that found envelopes, or at most every recordEvery otherwise: a
// restarted daemon resumes there, and what it reads twice the replay
// fence makes harmless.
type scanCursor struct {
	revision     uint64
	offset, line int64
	recorded     int64     // the offset the log holds
	recordedAt   time.Time // when it was recorded (wall clock)
	// skipped are the records read through since the recorded position,
	// recorded with the next position at once.
	skipped []events.RelaySkippedRecord
}

// recordEvery bounds how often the scanner records a position that
// found nothing: at most one event a minute per bridge thread.
const recordEvery = time.Minute

type relayState struct {
	mu       sync.Mutex
	cursors  map[string]*scanCursor // by bridge thread
	lastScan time.Time
}

// identity is a rollout file's resolved path, device and inode; it must
// be a regular file that no other user could rewrite (whoever can write
// a rollout can write relay lines into it).
func identity(path string) (string, uint64, uint64, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", 0, 0, errs.Wrap(errs.EINVAL, err, "rollout path")
	}
	abs, err = filepath.EvalSymlinks(abs)
	if err != nil {
		return "", 0, 0, errs.Wrap(errs.ENOENT, err, "rollout path")
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", 0, 0, errs.Wrap(errs.ENOENT, err, "rollout path")
	}
	if !st.Mode().IsRegular() {
		return "", 0, 0, errs.New(errs.EACCES, "not_regular: %s is not a regular file", abs)
	}
	if err := home.CheckUnshared("rollout", abs, false); err != nil {
		return "", 0, 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return "", 0, 0, errs.New(errs.EINTERNAL, "no device and inode for %s", abs)
	}
	return abs, uint64(sys.Dev), uint64(sys.Ino), nil
}

func (m *Module) relayOps(t api.Table) {
	api.Handle(t, api.DesktopRelayMarkerIssue, m.issueMarker)
	api.Handle(t, api.DesktopRelayScannerBind, func(ctx context.Context, a api.ScannerBindArgs) (api.ScannerBindReply, error) {
		path, dev, ino, err := identity(a.RolloutPath)
		if err != nil {
			return api.ScannerBindReply{}, err
		}
		val, res, err := engine.Exec[events.InstallationRelayScannerBound](ctx, m.h.Eng, engine.Meta{Actor: events.ActorOperator, CorrelationID: "relay-bind:" + a.BridgeThreadID},
			desktopcmd.BindRelayScanner{BridgeThreadID: a.BridgeThreadID, RolloutPath: path, Device: dev, Inode: ino})
		if err != nil {
			return api.ScannerBindReply{}, err
		}
		b := val
		return api.ScannerBindReply{Outcome: res.Outcome, BridgeThreadID: b.BridgeThreadID, RolloutPath: b.RolloutPath,
			Device: b.Device, Inode: b.Inode, BindingRevision: b.Revision}, nil
	})
	api.Handle(t, api.DesktopRelayConsume, m.consumeTranscript)
	api.Handle(t, api.DesktopReadArtifact, m.readArtifact)
	api.Handle(t, api.DesktopIssueLeases, func(ctx context.Context, a api.IssueLeasesArgs) (api.IssueLeasesReply, error) {
		in, err := m.h.Inspect(ctx, a.BatchID)
		if err != nil {
			return api.IssueLeasesReply{}, err
		}
		outcome, leases, err := m.recoveryLeases(ctx, in, a.Rotate)
		if leases == nil {
			leases = []query.RecoveryLeaseView{}
		}
		return api.IssueLeasesReply{Outcome: outcome, BatchID: in.Batch.BatchID, Leases: leases}, err
	})
	api.Handle(t, api.DesktopRevokeLease, func(ctx context.Context, a api.ArtifactLeaseArgs) (api.Outcome, error) {
		res, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorOperator, CorrelationID: "recovery-lease-revoke:" + a.ArtifactID},
			command.RevokeRecoveryLease{ArtifactID: a.ArtifactID})
		return api.Outcome{Outcome: res.Outcome}, err
	})
}

func (m *Module) issueMarker(ctx context.Context, a api.MarkerIssueArgs) (api.MarkerIssueReply, error) {
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		return api.MarkerIssueReply{}, errs.Wrap(errs.EINTERNAL, err, "draw a relay marker")
	}
	marker := "m1-" + hex.EncodeToString(b[:])
	tok := desktopcmd.ArmToken{ThreadID: a.SourceThreadID, AttemptID: a.AttemptID, Generation: a.Generation, BridgeRequestID: a.BridgeRequestID}
	val, res, err := engine.Exec[desktopcmd.IssuedMarker](ctx, m.h.Eng, engine.Meta{Actor: events.ActorBridge, CorrelationID: "bridge-request:" + a.BridgeRequestID},
		desktopcmd.IssueRelayMarker{Kind: a.Kind, BridgeThreadID: a.BridgeThreadID, ArmToken: tok, Marker: marker, TTL: m.h.Config.Desktop.RelayMarkerTTL.Duration})
	if err != nil {
		return api.MarkerIssueReply{}, err
	}
	mk := val
	env := relay.Envelope{Marker: mk.Marker, Kind: a.Kind, SourceThreadID: a.SourceThreadID, AttemptID: a.AttemptID,
		Generation: a.Generation, BridgeRequestID: a.BridgeRequestID}
	return api.MarkerIssueReply{Outcome: res.Outcome, Marker: mk.Marker, Kind: a.Kind, ExpiresAt: mk.ExpiresAt, Line: relay.Line(env)}, nil
}

// consume applies one envelope found in the rollout of bridge.
func (m *Module) consume(ctx context.Context, f relay.Found, bridge, path string) (desktopcmd.Consumed, engine.Result, error) {
	e := f.Envelope
	return engine.Exec[desktopcmd.Consumed](ctx, m.h.Eng, engine.Meta{Actor: events.ActorBridge, CorrelationID: "relay:" + e.Marker},
		desktopcmd.ConsumeRelay{Config: m.armConfig(), BridgeThreadID: bridge, Marker: e.Marker, Kind: e.Kind, ThreadID: e.SourceThreadID,
			AttemptID: e.AttemptID, Generation: e.Generation, RequestID: e.BridgeRequestID, SHA256: f.SHA256, RolloutPath: path, Line: f.Line,
			Fingerprints: m.fps})
}

// consumeTranscript is the operator's one-shot run over a whole rollout
// for one marker. The operator names the bridge whose rollout it is; a
// rollout another bridge's scanner is bound to is not that.
func (m *Module) consumeTranscript(ctx context.Context, a api.ConsumeArgs) (api.ConsumeReply, error) {
	if strings.TrimSpace(a.BridgeThreadID) == "" {
		return api.ConsumeReply{}, errs.New(errs.EINVAL, "bridge thread id is empty: name the bridge whose rollout this is")
	}
	path, dev, ino, err := identity(a.RolloutPath)
	if err != nil {
		return api.ConsumeReply{}, err
	}
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		inst, err := command.Installation(s)
		if inst == nil || err != nil {
			return err
		}
		for bridge, b := range inst.RelayScanners {
			if bridge != a.BridgeThreadID && b.Device == dev && b.Inode == ino {
				return errs.New(errs.EINVAL, "%s is the rollout bound to bridge thread %s's scanner, not %s's", path, bridge, a.BridgeThreadID)
			}
		}
		return nil
	}); err != nil {
		return api.ConsumeReply{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return api.ConsumeReply{}, errs.Wrap(errs.ENOENT, err, "open the rollout")
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return api.ConsumeReply{}, errs.IO(err, "stat the rollout")
	}
	if st.Size() > maxTranscript {
		return api.ConsumeReply{}, errs.New(errs.EFBIG, "oversized: %s is over %d bytes", path, maxTranscript)
	}
	round, err := relay.Read(f, 0, 0, st.Size(), relay.Limits{Record: relay.MaxRecord})
	if err != nil {
		return api.ConsumeReply{}, err
	}
	rep := api.ConsumeReply{BridgeThreadID: a.BridgeThreadID, RolloutPath: path, Marker: a.Marker, LinesRead: round.Line,
		Results: []api.ConsumeResult{}, Skipped: skippedRecords(round.Skipped)}
	for _, x := range round.Found {
		if x.Envelope.Marker != a.Marker {
			continue
		}
		v, res, err := m.consume(ctx, x, a.BridgeThreadID, path)
		if err != nil {
			return rep, err
		}
		rep.Results = append(rep.Results, consumeResult(x, v, res))
	}
	if len(rep.Results) == 0 {
		rep.Outcome = "not_found"
	} else {
		rep.Outcome = rep.Results[0].Outcome
		for _, r := range rep.Results {
			if r.Outcome == command.OutcomeConsumed {
				rep.Outcome = command.OutcomeConsumed
			}
		}
	}
	m.h.Poke(ctx)
	return rep, nil
}

// skippedRecords is the records a read skipped, as the log and the
// replies name them.
func skippedRecords(s []relay.Skipped) []events.RelaySkippedRecord {
	out := make([]events.RelaySkippedRecord, len(s))
	for i, sk := range s {
		out[i] = events.RelaySkippedRecord{Line: sk.Line, Bytes: sk.Bytes}
	}
	return out
}

func consumeResult(x relay.Found, v desktopcmd.Consumed, res engine.Result) api.ConsumeResult {
	return api.ConsumeResult{Line: x.Line, Kind: x.Envelope.Kind, Outcome: res.Outcome, Applied: v.Applied, Reason: v.Reason,
		EnvelopeSHA256: x.SHA256}
}

// scanRelay reads what the bound rollout files gained since the last
// scan and consumes the envelopes in it.
func (m *Module) scanRelay(ctx context.Context) {
	rs := &m.relay
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.lastScan = time.Now()
	var scanners map[string]aggregate.RelayScanner
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		inst, err := command.Installation(s)
		if inst != nil {
			scanners = inst.RelayScanners
		}
		return err
	}); err != nil || len(scanners) == 0 {
		return
	}
	if rs.cursors == nil {
		rs.cursors = map[string]*scanCursor{}
	}
	consumed := false
	for bridge, b := range scanners {
		if b.DegradedReason != "" {
			continue // stopped until a rebind
		}
		c := rs.cursors[bridge]
		if c == nil || c.revision != b.Revision {
			c = &scanCursor{revision: b.Revision, offset: b.Offset, line: b.Line, recorded: b.Offset, recordedAt: time.Now()}
			rs.cursors[bridge] = c
		}
		found, err := m.scanOnce(c, b.InstallationRelayScannerBound)
		if err != nil {
			reason := scanFailure(err)
			m.h.Log.Error("relay scanner degraded; rebind it (cbth desktop relay scanner bind)", "bridge", bridge, "rollout", b.RolloutPath,
				"reason", reason, "err", err)
			if _, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorDesktop, CorrelationID: "relay-scan:" + bridge},
				desktopcmd.DegradeRelayScanner{BridgeThreadID: bridge, Revision: b.Revision, Reason: reason, Detail: err.Error()}); err != nil {
				m.h.Log.Error("record the relay scanner degraded", "bridge", bridge, "err", err)
			}
			delete(rs.cursors, bridge)
			continue
		}
		for _, x := range found {
			_, res, err := m.consume(ctx, x, bridge, b.RolloutPath)
			if err != nil {
				m.h.Log.Error("relay consume", "bridge", bridge, "marker", x.Envelope.Marker, "err", err)
				continue
			}
			consumed = consumed || res.Outcome == command.OutcomeConsumed
			m.h.Log.Info("relay envelope", "bridge", bridge, "line", x.Line, "kind", x.Envelope.Kind, "outcome", res.Outcome)
		}
		// A skipped record is recorded at once: it shows the scanner
		// degraded, and a restart must not read it again.
		if c.offset > c.recorded && (len(found) > 0 || len(c.skipped) > 0 || time.Since(c.recordedAt) >= recordEvery) {
			if _, err := m.h.Eng.Execute(ctx, engine.Meta{Actor: events.ActorDesktop, CorrelationID: "relay-scan:" + bridge},
				desktopcmd.AdvanceRelayScanner{BridgeThreadID: bridge, Revision: b.Revision, Offset: c.offset, Line: c.line, Skipped: c.skipped}); err != nil {
				m.h.Log.Error("record the relay scanner's position", "bridge", bridge, "err", err)
			} else {
				c.recorded, c.recordedAt, c.skipped = c.offset, time.Now(), nil
			}
		}
	}
	if consumed {
		m.h.Poke(ctx)
	}
}

// scanOnce reads one bound rollout from its cursor. The file must still
// be the bound one (same device and inode, a regular file, never
// shorter than what was read).
func (m *Module) scanOnce(c *scanCursor, b events.InstallationRelayScannerBound) ([]relay.Found, error) {
	// O_NONBLOCK: a FIFO swapped in at the path must not hang the open.
	f, err := os.OpenFile(b.RolloutPath, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, scanError{events.RelayScannerUnreadable, err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, scanError{events.RelayScannerUnreadable, err}
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.Mode().IsRegular():
		return nil, scanError{events.RelayScannerNotRegular, errs.New(errs.EACCES, "the rollout is no longer a regular file")}
	case !ok || uint64(sys.Dev) != b.Device || uint64(sys.Ino) != b.Inode:
		return nil, scanError{events.RelayScannerReplaced, errs.New(errs.ESTALE, "the rollout path now names another file")}
	case st.Size() < c.offset:
		return nil, scanError{events.RelayScannerTruncated, errs.New(errs.ESTALE, "the rollout is %d bytes, shorter than the %d read", st.Size(), c.offset)}
	}
	if err := home.CheckUnshared("rollout", b.RolloutPath, false); err != nil {
		return nil, scanError{events.RelayScannerNotPrivate, err}
	}
	if _, err := f.Seek(c.offset, io.SeekStart); err != nil {
		return nil, scanError{events.RelayScannerUnreadable, err}
	}
	round, err := relay.Read(f, c.offset, c.line, st.Size(), scanLimits)
	if err != nil {
		return nil, scanError{events.RelayScannerUnreadable, err}
	}
	for _, sk := range round.Skipped {
		m.h.Log.Warn("relay scanner skipped a rollout record too long to read whole; a relay line in it is not read",
			"bridge", b.BridgeThreadID, "rollout", b.RolloutPath, "line", sk.Line, "bytes", sk.Bytes, "limit", scanLimits.Record)
	}
	c.skipped = append(c.skipped, skippedRecords(round.Skipped)...)
	c.offset, c.line = round.Offset, round.Line
	return round.Found, nil
}

// scanError is a scan failure with its degraded reason code.
type scanError struct {
	reason string
	err    error
}

func (e scanError) Error() string { return e.reason + ": " + e.err.Error() }
func (e scanError) Unwrap() error { return e.err }

// scanFailure is the degraded reason code of a scan error.
func scanFailure(err error) string {
	var se scanError
	if errors.As(err, &se) {
		return se.reason
	}
	return events.RelayScannerUnreadable
}

func (rs *relayState) lastScanned() time.Time {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.lastScan
}

// recoveryLeases issues (or, rotate, replaces) the recovery leases of the
// inspected batch's artifacts too large to be inline: `cbth desktop
// issue-artifact-leases`, the one command that does (batch inspect only
// shows them).
func (m *Module) recoveryLeases(ctx context.Context, in query.BatchInspection, rotate bool) (engine.Outcome, []query.RecoveryLeaseView, error) {
	limit := m.h.Config.Delivery.InlinePayloadLimit
	large := false
	for _, a := range in.Artifacts {
		large = large || a.SizeBytes > limit
	}
	if !large {
		return "none", nil, nil
	}
	ids := make([]string, len(in.Batch.ArtifactIDs))
	for i := range ids {
		var b [20]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", nil, errs.Wrap(errs.EINTERNAL, err, "draw a lease id")
		}
		ids[i] = "arl-" + hex.EncodeToString(b[:])
	}
	val, res, err := engine.Exec[[]command.RecoveryLease](ctx, m.h.Eng, engine.Meta{Actor: events.ActorOperator, CorrelationID: "recovery-lease:" + in.Batch.BatchID},
		command.IssueRecoveryLeases{BatchID: in.Batch.BatchID, InlineLimit: limit, TTL: m.h.Config.Desktop.RecoveryLease.Duration,
			Rotate: rotate, LeaseIDs: ids})
	if err != nil {
		return "", nil, err
	}
	var out []query.RecoveryLeaseView
	for _, l := range val {
		out = append(out, query.RecoveryLeaseView{ArtifactID: l.ArtifactID, LeaseID: l.LeaseID, Deadline: l.Deadline})
	}
	return res.Outcome, out, nil
}

// readArtifact returns one chunk of an artifact under its recovery lease.
func (m *Module) readArtifact(_ context.Context, a api.ReadArtifactArgs) (api.ReadArtifactReply, error) {
	if a.Offset < 0 || a.MaxBytes <= 0 {
		return api.ReadArtifactReply{}, errs.New(errs.EINVAL, "offset must be at least 0 and max bytes at least 1")
	}
	if a.MaxBytes > api.MaxArtifactChunk {
		a.MaxBytes = api.MaxArtifactChunk
	}
	var art *aggregate.Artifact
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		var err error
		art, err = engine.Artifact(s, a.ArtifactID)
		return err
	}); err != nil {
		return api.ReadArtifactReply{}, err
	}
	if why := command.LeaseValid(art, a.LeaseID, m.h.Clock.Now()); why != "" {
		return api.ReadArtifactReply{}, errs.New(errs.ESTALE, "artifact read lease: %s", why)
	}
	f, _, err := artifact.OpenRegular(art.ManagedPath, "artifact")
	if err != nil {
		return api.ReadArtifactReply{}, err
	}
	defer f.Close()
	buf := make([]byte, a.MaxBytes)
	n, err := f.ReadAt(buf, a.Offset)
	if err != nil && err != io.EOF {
		return api.ReadArtifactReply{}, errs.IO(err, "read artifact %s", art.ID)
	}
	next := a.Offset + int64(n)
	return api.ReadArtifactReply{ArtifactID: art.ID, Offset: a.Offset, Bytes: n, Data: buf[:n], NextOffset: next,
		EOF: next >= art.SizeBytes, SizeBytes: art.SizeBytes, SHA256: art.SHA256}, nil
}
