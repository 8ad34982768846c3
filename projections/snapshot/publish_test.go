package snapshot_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/desktop"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	desktopcmd "github.com/cbth-dev/cbth/engine/command/desktop"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
	"github.com/cbth-dev/cbth/projections/inbox"
	"github.com/cbth-dev/cbth/projections/snapshot"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

var cfg = command.DeliveryConfig{MaxJobsPerBatch: 8, MaxTotalBytes: 1 << 20, Cooldown: time.Minute, RedeliveryWindow: 24 * time.Hour,
	MaxDeliveryAttempts: 5, EligibleBackoff: time.Minute, InlinePayloadLimit: 1 << 10, ObservationWindow: time.Hour,
	MinArtifactTTL: time.Hour, PostCloseTTL: time.Hour}

const fp = "fp1-test"

var fps = snapshot.Fingerprints{desktopcmd.TransportDirect: fp, desktopcmd.TransportHelper: fp}

type world struct {
	tb    testing.TB
	e     *engine.Engine
	clock *engine.ManualClock
}

func newWorld(tb testing.TB) *world {
	clock := engine.NewManualClock(t0)
	e := enginetest.Open(tb, filepath.Join(tb.TempDir(), "cbth.db"), engine.Options{Clock: clock, NoSync: true})
	w := &world{tb: tb, e: e, clock: clock}
	w.exec(desktopcmd.RepairInstallation{ReadTransport: desktopcmd.TransportDirect, ReadCap: events.CapValidated,
		WritebackCap: events.CapValidated, Fingerprint: fp})
	w.exec(desktopcmd.SelectBridge{BridgeThreadID: "B"})
	return w
}

func (w *world) exec(c engine.Decider) engine.Result {
	w.tb.Helper()
	res, err := w.e.Execute(context.Background(), engine.Meta{Actor: events.ActorOperator}, c)
	if err != nil {
		w.tb.Fatalf("%T: %v", c, err)
	}
	return res
}

// populate binds bound threads and makes the first ready of them ready:
// a low-risk completed job each, its attempt prepared.
func (w *world) populate(bound, ready int) {
	for i := range bound {
		w.exec(desktopcmd.RepairBinding{ThreadID: thread(i), AutomationID: "automation-" + strconv.Itoa(i)})
	}
	for i := range ready {
		id, _ := enginetest.Answer[string](w.tb, w.e, engine.Meta{Actor: events.ActorOperator}, command.SubmitJob{Target: command.TargetDesktop, ThreadID: thread(i), TaskKind: "ci", Summary: "s",
			Policy: events.DeliveryPolicy{ReadOnly: true}})
		w.exec(command.CompleteJob{Config: cfg, JobID: id, Summary: "done"})
		w.exec(command.PrepareAttempt{Config: cfg, ThreadID: thread(i), DeliveryMode: command.ModeDesktop})
	}
}

func thread(i int) string { return fmt.Sprintf("thread-%05d", i) }

func (w *world) build() snapshot.Content {
	w.tb.Helper()
	var c snapshot.Content
	err := w.e.Read(func(s engine.Snapshot) error {
		var ok bool
		var err error
		if c, ok, err = snapshot.Build(s, cfg, w.clock.Now(), fps); err == nil && !ok {
			err = fmt.Errorf("nothing to publish")
		}
		return err
	})
	if err != nil {
		w.tb.Fatal(err)
	}
	return c
}

func newPublisher(dir string) *snapshot.Publisher {
	return &snapshot.Publisher{Files: desktop.InboxFiles{Dir: dir}, MaxAge: 2 * time.Minute, Interval: 30 * time.Second, Retention: time.Minute, Log: slog.New(slog.DiscardHandler)}
}

// A publication reuses its revision while the content is the same, takes
// a new one when it changes, never reuses a number after a restart or a
// publication cut short, and prunes a superseded revision only once it
// has been superseded for the retention.
func TestPublisher_RevisionsAndPruning(t *testing.T) {
	w := newWorld(t)
	w.populate(3, 2)
	dir := filepath.Join(t.TempDir(), "inbox")
	p := newPublisher(dir)
	c := w.build()
	now := t0
	pub := func(c snapshot.Content, confirm bool) snapshot.Publication {
		t.Helper()
		res, err := p.Publish(c, w.e.Head(), now, confirm)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if r := pub(c, false); r.Outcome != snapshot.Published || r.Manifest.SnapshotRevision != 1 || len(c.Ready) != 2 {
		t.Fatalf("first: %+v (%d ready)", r, len(c.Ready))
	}
	if r := pub(c, false); r.Outcome != snapshot.Unchanged || r.Manifest.SnapshotRevision != 1 {
		t.Fatalf("same content: %+v", r)
	}
	now = now.Add(10 * time.Second)
	if r := pub(c, true); r.Outcome != snapshot.Confirmed || r.Manifest.SnapshotRevision != 1 || !r.Manifest.PublishedAt.Equal(now) ||
		!r.Manifest.CreatedAt.Equal(t0) || !r.Manifest.FreshUntil.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("confirmed: %+v", r)
	}
	if !p.Current(w.e.Head(), now.Add(29*time.Second)) || p.Current(w.e.Head(), now.Add(31*time.Second)) || p.Current(w.e.Head()+1, now) {
		t.Fatal("Current: the same head within the interval only")
	}
	w.exec(desktopcmd.UnbindBinding{ThreadID: thread(0)})
	c2 := w.build()
	if r := pub(c2, false); r.Outcome != snapshot.Published || r.Manifest.SnapshotRevision != 2 || len(c2.Ready) != 1 {
		t.Fatalf("new content: %+v", r)
	}
	rev1 := filepath.Join(dir, "snapshots", "1")
	if _, err := os.Stat(rev1); err != nil {
		t.Fatal("revision 1 pruned as soon as it was superseded")
	}
	// A publication cut short before its manifest leaves a directory; a
	// new publisher (a restart) never reuses its number.
	if err := os.MkdirAll(filepath.Join(dir, "snapshots", "7"), 0o700); err != nil {
		t.Fatal(err)
	}
	p = newPublisher(dir)
	now = now.Add(2 * time.Minute)
	if r := pub(c, false); r.Outcome != snapshot.Published || r.Manifest.SnapshotRevision != 8 {
		t.Fatalf("after a restart: %+v", r)
	}
	if _, err := os.Stat(rev1); err != nil {
		t.Fatal("revisions found at start pruned at once")
	}
	now = now.Add(time.Minute)
	pub(c2, false)
	for _, rev := range []string{"1", "2", "7"} {
		if _, err := os.Stat(filepath.Join(dir, "snapshots", rev)); err == nil {
			t.Fatalf("revision %s kept past the retention", rev)
		}
	}
	d, err := inbox.Reader{Dir: dir, Bridge: "B"}.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Manifest.SnapshotRevision != 9 {
		t.Fatalf("manifest %+v", d.Manifest)
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshots", "8")); err != nil {
		t.Fatal("revision 8 pruned before its retention")
	}
}

// logRevisions is a log's record of reserved revisions.
type logRevisions struct{ through, calls uint64 }

func (l *logRevisions) Reserved() (uint64, error) { return l.through, nil }
func (l *logRevisions) Reserve(through uint64) error {
	l.through, l.calls = through, l.calls+1
	return nil
}

// With the log keeping the revisions, a publisher reserves a block at
// its first new revision and again only when the block runs out; one
// that starts (the inbox deleted or not) begins after the block.
func TestPublisher_RevisionsFromTheLog(t *testing.T) {
	w := newWorld(t)
	w.populate(3, 2)
	dir := filepath.Join(t.TempDir(), "inbox")
	log := &logRevisions{}
	p := newPublisher(dir)
	p.Revisions = log
	c := w.build()
	r, err := p.Publish(c, w.e.Head(), t0, false)
	if err != nil || r.Manifest.SnapshotRevision != 1 || log.through != snapshot.RevisionBlock || log.calls != 1 {
		t.Fatalf("first: %v %+v, log %+v", err, r, log)
	}
	w.exec(desktopcmd.UnbindBinding{ThreadID: thread(0)})
	if r, err = p.Publish(w.build(), w.e.Head(), t0, false); err != nil || r.Manifest.SnapshotRevision != 2 || log.calls != 1 {
		t.Fatalf("within the block: %v %+v, log %+v", err, r, log)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	p = newPublisher(dir)
	p.Revisions = log
	if r, err = p.Publish(c, w.e.Head(), t0, false); err != nil || r.Manifest.SnapshotRevision != snapshot.RevisionBlock+1 || log.through != 2*snapshot.RevisionBlock {
		t.Fatalf("after a restart without the inbox: %v %+v, log %+v", err, r, log)
	}
}

// The benchmarks of spec/desktop.md: a publication of a new revision with
// 10,000 bound threads of which 1,000 are ready, and publications that
// find nothing changed.
func benchWorld(b *testing.B) (*world, *snapshot.Publisher) {
	w := newWorld(b)
	w.populate(10_000, 1_000)
	return w, newPublisher(filepath.Join(b.TempDir(), "inbox"))
}

func BenchmarkPublish_NewRevision(b *testing.B) {
	w, p := benchWorld(b)
	b.ResetTimer()
	for range b.N {
		c := w.build()
		snapshot.ForgetContent(p) // as if the content had changed
		if r, err := p.Publish(c, w.e.Head(), w.clock.Now(), false); err != nil || r.Outcome != snapshot.Published || len(c.Ready) != 1000 {
			b.Fatalf("%+v %v (%d ready)", r, err, len(c.Ready))
		}
	}
}

// The log moved but the content did not (a job of another target): the
// builder finds nothing to read again, compares, writes nothing.
func BenchmarkPublish_SameContent(b *testing.B) {
	w, p := benchWorld(b)
	bl := &snapshot.Builder{Config: cfg, Fingerprints: fps}
	if _, err := p.Publish(mustBuild(w, bl), w.e.Head(), w.clock.Now(), false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		w.exec(command.SubmitJob{Target: "debug", ThreadID: "elsewhere", TaskKind: "ci", Summary: "s"})
		if r, err := p.Publish(mustBuild(w, bl), w.e.Head(), w.clock.Now(), false); err != nil || r.Outcome != snapshot.Unchanged {
			b.Fatalf("%+v %v", r, err)
		}
	}
}

// One change (a skip, which reorders the ready set) then a publication:
// the builder reads only what the change touched.
func BenchmarkPublish_OneChange(b *testing.B) {
	w, p := benchWorld(b)
	bl := &snapshot.Builder{Config: cfg, Fingerprints: fps}
	if _, err := p.Publish(mustBuild(w, bl), w.e.Head(), w.clock.Now(), false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		w.exec(command.SkipHead{ThreadID: thread(i % 1000)})
		if r, err := p.Publish(mustBuild(w, bl), w.e.Head(), w.clock.Now(), false); err != nil || r.Outcome != snapshot.Published {
			b.Fatalf("%+v %v", r, err)
		}
	}
}

func mustBuild(w *world, b *snapshot.Builder) snapshot.Content {
	c, ok := w.buildAfter(b)
	if !ok || len(c.Ready) != 1000 {
		w.tb.Fatalf("built %d ready", len(c.Ready))
	}
	return c
}

// Nothing changed at all: the daemon's check before it builds.
func BenchmarkPublish_Unchanged(b *testing.B) {
	w, p := benchWorld(b)
	if _, err := p.Publish(w.build(), w.e.Head(), w.clock.Now(), false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if !p.Current(w.e.Head(), w.clock.Now()) {
			b.Fatal("not current")
		}
	}
}

// buildAfter builds incrementally from the builder's last build, with the
// streams the log appended to since.
func (w *world) buildAfter(b *snapshot.Builder) (snapshot.Content, bool) {
	w.tb.Helper()
	var ch *snapshot.Changes
	if b.Since() > 0 {
		ch = &snapshot.Changes{Since: b.Since(), Upto: b.Since()}
		if err := w.e.ReadFrom(ch.Since+1, func(env events.Envelope) error {
			ch.Streams, ch.Upto = append(ch.Streams, env.Stream), env.Seq
			return nil
		}); err != nil {
			w.tb.Fatal(err)
		}
	}
	var c snapshot.Content
	var ok bool
	if err := w.e.Read(func(s engine.Snapshot) error {
		var err error
		c, ok, err = b.Build(s, w.clock.Now(), ch)
		return err
	}); err != nil {
		w.tb.Fatal(err)
	}
	return c, ok
}

// Seeded random operations: after each one, the incremental build equals
// a build from scratch.
func TestBuilder_IncrementalEqualsFull(t *testing.T) {
	w := newWorld(t)
	rnd := rand.New(rand.NewPCG(7, 11))
	b := &snapshot.Builder{Config: cfg, Fingerprints: fps}
	threads := 12
	try := func(c engine.Decider) {
		if _, err := w.e.Execute(context.Background(), engine.Meta{Actor: events.ActorOperator}, c); err != nil && errs.CodeOf(err) == errs.EINTERNAL {
			t.Fatalf("%T: %v", c, err)
		}
	}
	incremental := 0
	for step := range 600 {
		th := thread(rnd.IntN(threads))
		switch op := rnd.IntN(100); {
		case op < 20:
			try(desktopcmd.RepairBinding{ThreadID: th, AutomationID: fmt.Sprintf("a-%s-%d", th, rnd.IntN(2))})
		case op < 25:
			try(desktopcmd.UnbindBinding{ThreadID: th})
		case op < 50:
			p := events.DeliveryPolicy{ReadOnly: true}
			if rnd.IntN(8) == 0 {
				p = events.FailClosedPolicy
			}
			id, _ := enginetest.Answer[string](t, w.e, engine.Meta{}, command.SubmitJob{Target: command.TargetDesktop, ThreadID: th, TaskKind: "k", Summary: "s", Policy: p})
			try(command.CompleteJob{Config: cfg, JobID: id, Summary: "done"})
		case op < 70:
			// What the scheduler does for a Desktop head.
			var gate aggregate.DesktopReadiness
			var el command.Eligibility
			w.e.Read(func(s engine.Snapshot) error {
				el, _ = cfg.Eligible(s, w.clock.Now(), th)
				if el.OK {
					gate, _ = desktopcmd.DesktopGate(s, w.clock.Now(), el.Batch, fp)
				}
				return nil
			})
			switch {
			case el.OK && gate.Park:
				try(command.ParkHead{ThreadID: th, BatchID: el.Batch.ID, Reason: gate.Reason})
			case el.OK && gate.OK:
				try(command.PrepareAttempt{Config: cfg, ThreadID: th, DeliveryMode: command.ModeDesktop})
			}
		case op < 78:
			try(command.CloseHead{Config: cfg, ThreadID: th, Reason: command.CloseOperatorUnconfirmed})
		case op < 86:
			try(command.SkipHead{ThreadID: th})
		case op < 89:
			caps := []string{events.CapValidated, events.CapUnknown}
			try(desktopcmd.RepairInstallation{ReadTransport: desktopcmd.TransportDirect, ReadCap: caps[rnd.IntN(2)], WritebackCap: events.CapValidated, Fingerprint: fp})
		case op < 91:
			try(desktopcmd.SelectBridge{BridgeThreadID: []string{"B", "B2"}[rnd.IntN(2)]})
		case op < 95:
			// What part 2's arm and pause proofs record on a binding,
			// without an attempt event.
			var bd *aggregate.Binding
			w.e.Read(func(s engine.Snapshot) error { bd, _ = command.BindingOf(s, th); return nil })
			if bd == nil || (bd.State != fsm.BindingBound && bd.State != fsm.BindingDegraded) {
				continue
			}
			var ev events.Payload = &events.BindingQuiesced{Generation: bd.ArmedGeneration}
			if bd.State == fsm.BindingBound && rnd.IntN(2) == 0 {
				now := w.clock.Now()
				ev = &events.BindingArmed{Generation: bd.ArmedGeneration + 1, PauseNotBefore: now.Add(90 * time.Second), PauseDeadline: now.Add(180 * time.Second)}
			}
			if _, err := w.e.Append(context.Background(), engine.Meta{}, events.StreamID{Kind: events.KindBinding, ID: bd.ID}, bd.Version, ev); err != nil {
				t.Fatal(err)
			}
		default:
			w.clock.Advance(time.Duration(rnd.IntN(90)) * time.Second)
		}
		before := b.Since()
		inc, okI := w.buildAfter(b)
		if before > 0 && snapshot.Placed(b) && len(inc.Ready) > 0 {
			incremental++
		}
		var full snapshot.Content
		var okF bool
		if err := w.e.Read(func(s engine.Snapshot) error {
			var err error
			full, okF, err = snapshot.Build(s, cfg, w.clock.Now(), fps)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		inc.Version = 0 // a builder numbers its contents; a build from scratch does not
		if okI != okF || !reflect.DeepEqual(inc, full) {
			t.Fatalf("step %d: incremental and full builds differ:\n%+v\n%+v", step, inc, full)
		}
	}
	if incremental < 100 {
		t.Fatalf("only %d builds after a previous one with threads ready: the run shows little", incremental)
	}
}
