package query

import (
	"bytes"
	"encoding/json"
	"sort"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// KindOf names the kind of aggregate id is, "" when no aggregate has it:
// a command given the id of another kind says so instead of "not found".
func KindOf(s engine.Reader, id string) (events.Kind, error) {
	for _, k := range events.Kinds {
		st, err := s.State(k, id)
		if err != nil {
			return "", err
		}
		if st != nil {
			return k, nil
		}
	}
	return "", nil
}

// NotA is the error for an id that names no aggregate of kind want: ENOENT
// when it names none at all, EINVAL naming the kind it is otherwise.
func NotA(s engine.Reader, want events.Kind, id string) error {
	k, err := KindOf(s, id)
	switch {
	case err != nil:
		return err
	case k == "":
		return errs.New(errs.ENOENT, "no %s %s", want, id)
	}
	return errs.New(errs.EINVAL, "%s is a %s, not a %s", id, k, want)
}

// StreamReader reads one stream's events up to a seq (engine.Engine).
type StreamReader interface {
	ReadStreamUntil(sid events.StreamID, until uint64, fn func(events.Envelope) error) error
}

// Change is one field of a view an event changed.
type Change struct {
	Field  string          `json:"field"`
	Before json.RawMessage `json:"before"`
	After  json.RawMessage `json:"after"`
}

// HistoryEntry is one event of a story: who did what when, and which
// fields of its aggregate's view it changed.
type HistoryEntry struct {
	Seq        uint64          `json:"seq"`
	RecordedAt time.Time       `json:"recorded_at"`
	Actor      events.Actor    `json:"actor"`
	Type       string          `json:"type"`
	Stream     events.StreamID `json:"stream"`
	State      string          `json:"state"`
	Changes    []Change        `json:"changes"`
	Hash       events.Hash     `json:"hash"`
}

// HistoryPage is one page of a story; Next, when set, is the seq the next
// page starts after.
type HistoryPage struct {
	Entries []HistoryEntry `json:"entries"`
	Next    uint64         `json:"next,omitempty"`
}

// BatchStreams names the streams of a batch's story: the batch, its
// attempts, its jobs and their artifacts, as s knows them (a present
// snapshot knows every one a past moment did: a batch only gains jobs
// and attempts, and an attempt or a job never changes batch).
func BatchStreams(s engine.Reader, id string) ([]events.StreamID, error) {
	b, err := engine.Batch(s, id)
	if err != nil {
		return nil, err
	}
	if b == nil {
		return nil, NotA(s, events.KindBatch, id)
	}
	out := []events.StreamID{{Kind: events.KindBatch, ID: id}}
	for _, r := range s.Lookup(index.BatchAttempts, id) {
		out = append(out, events.StreamID{Kind: events.KindAttempt, ID: r.ID})
	}
	for _, j := range b.JobIDs {
		out = append(out, events.StreamID{Kind: events.KindJob, ID: j})
	}
	for _, a := range b.ArtifactIDs {
		out = append(out, events.StreamID{Kind: events.KindArtifact, ID: a})
	}
	return out, nil
}

// JobStreams names the streams of a job's story: the job, its artifact
// and the task that ran it.
func JobStreams(s engine.Reader, id string) ([]events.StreamID, error) {
	j, err := engine.Job(s, id)
	if err != nil {
		return nil, err
	}
	if j == nil {
		return nil, NotA(s, events.KindJob, id)
	}
	out := []events.StreamID{{Kind: events.KindJob, ID: id}}
	if j.ArtifactID != "" {
		out = append(out, events.StreamID{Kind: events.KindArtifact, ID: j.ArtifactID})
	}
	if t := TaskOfJob(s, id); t != "" {
		out = append(out, events.StreamID{Kind: events.KindTask, ID: t})
	}
	return out, nil
}

// History tells the story of streams up to seq until (0: all), merged in
// log order, one page of entries after seq after. Each entry lists the
// fields of its aggregate's view (ViewOf) the event changed, before and
// after: the states are folded again from each stream's first event, so
// a page costs the whole story's events, never the log's.
func History(r StreamReader, streams []events.StreamID, until, after uint64, limit int) (HistoryPage, error) {
	type item struct {
		env events.Envelope
		p   events.Payload
	}
	var all []item
	for _, sid := range streams {
		err := r.ReadStreamUntil(sid, until, func(env events.Envelope) error {
			p, err := events.DecodePayload(&env)
			if err != nil {
				return errs.Wrap(errs.ECORRUPT, err, "seq %d", env.Seq)
			}
			all = append(all, item{env, p})
			return nil
		})
		if err != nil {
			return HistoryPage{}, err
		}
	}
	// Each stream came in log order: merging is a sort of presorted runs.
	sort.SliceStable(all, func(i, j int) bool { return all[i].env.Seq < all[j].env.Seq })
	ms := fsm.New()
	states := map[events.StreamID]aggregate.State{}
	views := map[events.StreamID]map[string]json.RawMessage{}
	pg := HistoryPage{Entries: []HistoryEntry{}}
	p := newPager[HistoryEntry](limit)
	for i := range all {
		it := &all[i]
		sid := it.env.Stream
		s, err := aggregate.Apply(ms, states[sid], &it.env, it.p)
		if err != nil {
			return HistoryPage{}, err
		}
		states[sid] = s
		after0 := fieldsOf(ViewOf(s))
		before := views[sid]
		views[sid] = after0
		if it.env.Seq <= after {
			continue
		}
		e := HistoryEntry{Seq: it.env.Seq, RecordedAt: it.env.RecordedAt, Actor: it.env.Actor, Type: it.env.Type,
			Stream: sid, State: s.Head().State, Changes: changes(before, after0), Hash: it.env.Hash}
		if !p.add(e) {
			pg.Next = p.items[len(p.items)-1].Seq
			break
		}
	}
	pg.Entries = p.items
	return pg, nil
}

// fieldsOf renders a view as its JSON fields.
func fieldsOf(v any) map[string]json.RawMessage {
	b, err := json.Marshal(v)
	m := map[string]json.RawMessage{}
	if err == nil {
		_ = json.Unmarshal(b, &m)
	}
	return m
}

// changes lists the fields whose values differ, in name order; version
// and updated_at, which every event moves, are left out, and so, for a
// stream's first event (before is nil), are the fields it left empty.
func changes(before, after map[string]json.RawMessage) []Change {
	null := json.RawMessage("null")
	names := map[string]bool{}
	for k := range before {
		names[k] = true
	}
	for k := range after {
		names[k] = true
	}
	out := []Change{}
	for _, k := range sortedKeys(names) {
		if k == "version" || k == "updated_at" {
			continue
		}
		b, ok := before[k]
		if !ok {
			b = null
		}
		a, ok := after[k]
		if !ok {
			a = null
		}
		if before == nil && empty(a) {
			continue
		}
		if !bytes.Equal(b, a) {
			out = append(out, Change{Field: k, Before: b, After: a})
		}
	}
	return out
}

// empty reports whether a JSON value is its type's zero.
func empty(v json.RawMessage) bool {
	switch string(v) {
	case "null", `""`, "0", "false", "[]", "{}":
		return true
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ThreadBatch is one batch in a thread's history.
type ThreadBatch struct {
	BatchID              string         `json:"batch_id"`
	OpenedSeq            uint64         `json:"opened_seq"`
	State                fsm.BatchState `json:"state"`
	Head                 bool           `json:"head"`
	JobIDs               []string       `json:"job_ids"`
	FirstReadyAt         time.Time      `json:"first_ready_at"`
	DeliveryAttemptCount int            `json:"delivery_attempt_count"`
	ReplayPolicy         string         `json:"replay_policy"`
	ClosedAt             *time.Time     `json:"closed_at"`
	CloseReason          string         `json:"close_reason"`
	CloseDetail          string         `json:"close_detail"`
}

// ThreadHistoryPage is one page of a thread's batches in FIFO order;
// Next, when set, is the batch_id the next page starts after.
type ThreadHistoryPage struct {
	SourceThreadID string        `json:"source_thread_id"`
	Batches        []ThreadBatch `json:"batches"`
	Next           string        `json:"next,omitempty"`
	// Trust is the trust the thread's Codex deliveries get (the first
	// page only; the daemon fills in the home's when the thread has none
	// of its own).
	Trust *ThreadTrustView `json:"thread_trust,omitempty"`
}

// ThreadTrustView is the trust a Codex thread's deliveries get
// (spec/codex-cli.md section 17): the user's for that thread (source
// "thread", since it was given) or the home's [cli] trust ("home").
type ThreadTrustView struct {
	Trust  string     `json:"trust"`
	Source string     `json:"source"`
	Since  *time.Time `json:"since,omitempty"`
}

// ThreadTrust is the trust the user gave thread itself, or nil.
func ThreadTrust(s engine.Reader, thread string) (*ThreadTrustView, error) {
	t, err := engine.Thread(s, thread)
	if err != nil || t == nil || t.State != fsm.ThreadTrusted {
		return nil, err
	}
	since := t.UpdatedAt
	return &ThreadTrustView{Trust: t.Trust, Source: "thread", Since: &since}, nil
}

// ThreadHistory lists every batch a thread ever had, in the order they
// joined its FIFO (the batch.thread index), with how each closed.
func ThreadHistory(s engine.Reader, thread, after string, limit int) (ThreadHistoryPage, error) {
	if thread == "" {
		return ThreadHistoryPage{}, errs.New(errs.EINVAL, "source thread id is empty")
	}
	var list []*aggregate.Batch
	skipping := after != ""
	for _, r := range s.Scan(index.BatchThread, index.ThreadPrefix(thread)) {
		if _, ok := index.ThreadOpenSeq(r.Key, thread); !ok {
			continue
		}
		if skipping {
			skipping = r.ID != after
			continue
		}
		b, err := engine.Batch(s, r.ID)
		if err != nil {
			return ThreadHistoryPage{}, err
		}
		if b != nil {
			list = append(list, b)
		}
	}
	if skipping {
		return ThreadHistoryPage{}, errs.New(errs.ENOENT, "thread %s has no batch %s to list after", thread, after)
	}
	pg := ThreadHistoryPage{SourceThreadID: thread}
	if after == "" {
		var err error
		if pg.Trust, err = ThreadTrust(s, thread); err != nil {
			return ThreadHistoryPage{}, err
		}
	}
	pg.Batches, pg.Next = pageOf(list, limit, func(b *aggregate.Batch) ThreadBatch {
		return ThreadBatch{BatchID: b.ID, OpenedSeq: b.OpenedSeq, State: b.State, Head: b.IsHead, JobIDs: b.JobIDs,
			FirstReadyAt: b.FirstReadyAt, DeliveryAttemptCount: b.DeliveryAttemptCount, ReplayPolicy: b.ReplayPolicy,
			ClosedAt: opt(b.ClosedAt), CloseReason: b.CloseReason, CloseDetail: b.CloseDetail}
	}, func(b *aggregate.Batch) string { return b.ID })
	return pg, nil
}
