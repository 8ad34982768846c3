package query

import (
	"errors"
	"sort"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/index"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// MaxPage bounds one page of a listing, so a page always fits in one
// socket frame. Listings take a limit (0 means MaxPage) and an opaque
// cursor, after, that the previous page returned as next.
const MaxPage = 500

func pageLimit(n int) int {
	if n <= 0 || n > MaxPage {
		return MaxPage
	}
	return n
}

// errStop ends a walk early; a literal, so no fmt runs at package init.
var errStop error = &errs.Error{Code: errs.EINTERNAL, Message: "stop walking"}

// Job returns one job's view, with its artifact and the batch its result
// joined.
func Job(s engine.Reader, id string) (JobView, error) {
	if id == "" {
		return JobView{}, errs.New(errs.EINVAL, "job id is empty")
	}
	j, err := engine.Job(s, id)
	if err != nil {
		return JobView{}, err
	}
	if j == nil {
		return JobView{}, errs.New(errs.ENOENT, "no job %s", id)
	}
	return jobView(s, j)
}

func jobView(s engine.Reader, j *aggregate.Job) (JobView, error) {
	var a *aggregate.Artifact
	var b *aggregate.Batch
	var err error
	if j.ArtifactID != "" {
		if a, err = engine.Artifact(s, j.ArtifactID); err != nil {
			return JobView{}, err
		}
	}
	if j.BatchID != "" {
		if b, err = engine.Batch(s, j.BatchID); err != nil {
			return JobView{}, err
		}
	}
	v := NewJobView(j, a, b)
	v.TaskID = TaskOfJob(s, j.ID)
	return v, nil
}

// JobFilter selects jobs for Jobs.
type JobFilter struct {
	ThreadID string
	State    fsm.JobState // "" for all
	After    string
	Limit    int
}

// JobPage is one page of jobs in id (submission) order; Next, when set,
// is the cursor of the following page.
type JobPage struct {
	Jobs []JobView `json:"jobs"`
	Next string    `json:"next,omitempty"`
}

// Jobs lists jobs in id order (ids are time-ordered UUIDv7s), one page
// (see PageBytes) at a time.
func Jobs(s engine.Snapshot, f JobFilter) (JobPage, error) {
	p := newPager[JobView](f.Limit)
	var next string
	add := func(j *aggregate.Job) error {
		if f.State != "" && j.State != f.State {
			return nil
		}
		v, err := jobView(s, j)
		if err != nil {
			return err
		}
		if !p.add(v) {
			next = p.items[len(p.items)-1].JobID
			return errStop
		}
		return nil
	}
	var err error
	if f.ThreadID != "" {
		for _, id := range JobIDsOfThread(s, f.ThreadID) {
			if id <= f.After {
				continue
			}
			j, err2 := engine.Job(s, id)
			if err2 != nil {
				return JobPage{}, err2
			}
			if j == nil {
				continue
			}
			if err = add(j); err != nil {
				break
			}
		}
	} else {
		err = s.ForEachAfter(events.KindJob, f.After, func(st aggregate.State) error { return add(st.(*aggregate.Job)) })
	}
	if errors.Is(err, errStop) {
		err = nil
	}
	return JobPage{Jobs: p.items, Next: next}, err
}

// JobIDsOfThread lists a thread's jobs in id order.
func JobIDsOfThread(s engine.Reader, thread string) []string {
	refs := s.Lookup(index.JobThread, thread)
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.ID
	}
	sort.Strings(out)
	return out
}

// HeadBatchID returns a thread's head (oldest open) batch, or "".
func HeadBatchID(s engine.Reader, thread string) string {
	for _, r := range s.Scan(index.ThreadOpen, index.ThreadPrefix(thread)) {
		if _, ok := index.ThreadOpenSeq(r.Key, thread); ok {
			return r.ID
		}
	}
	return ""
}

// BatchInspection is a batch with every field, its attempts (newest
// first), its artifacts and jobs, and, while it is open, whether it may
// get a fresh delivery now (delivery_gate, filled in by the daemon, which
// also asks the batch's target). The three lists share one PageBytes:
// what does not fit is counted in Omitted (batch.job_ids and
// batch.artifact_ids still name every one, for `job query`).
type BatchInspection struct {
	Batch       BatchView                `json:"batch"`
	HeadAttempt *AttemptView             `json:"head_attempt"`
	Attempts    []AttemptView            `json:"attempts"`
	Artifacts   []ArtifactView           `json:"artifacts"`
	Jobs        []JobView                `json:"jobs"`
	Gate        string                   `json:"delivery_gate"`
	Recovery    *events.RecoveryEnvelope `json:"boundary_recovery_envelope"`
	// RecoveryLeases are the operator's read leases on the batch's
	// artifacts too large to be inline (batch inspect --batch-id).
	RecoveryLeases []RecoveryLeaseView `json:"artifact_recovery_leases,omitempty"`
	Omitted        *Omitted            `json:"omitted,omitempty"`
	// AsOfSeq is set on an inspection of the past (--as-of, --seq): the
	// seq of the last event it was folded up to.
	AsOfSeq uint64 `json:"as_of_seq,omitempty"`
	// ThreadTrust is the trust a cli batch's thread gets now (the daemon
	// fills it in for a batch of the cli target).
	ThreadTrust *ThreadTrustView `json:"thread_trust,omitempty"`
}

// RecoveryLeaseView is one artifact recovery lease.
type RecoveryLeaseView struct {
	ArtifactID string    `json:"artifact_id"`
	LeaseID    string    `json:"artifact_recovery_lease_id"`
	Deadline   time.Time `json:"artifact_recovery_lease_deadline"`
}

// Omitted counts what a reply left out to stay within a frame.
type Omitted struct {
	Attempts  int `json:"attempts"`
	Artifacts int `json:"artifacts"`
	Jobs      int `json:"jobs"`
}

// Inspect returns a batch's inspection.
func Inspect(s engine.Reader, id string) (BatchInspection, error) {
	if id == "" {
		return BatchInspection{}, errs.New(errs.EINVAL, "batch id is empty")
	}
	b, err := engine.Batch(s, id)
	if err != nil {
		return BatchInspection{}, err
	}
	if b == nil {
		return BatchInspection{}, errs.New(errs.ENOENT, "no batch %s", id)
	}
	in := BatchInspection{Batch: NewBatchView(b), Recovery: b.BoundaryRecoveryEnvelope,
		Attempts: []AttemptView{}, Artifacts: []ArtifactView{}, Jobs: []JobView{}}
	var attempts []*aggregate.Attempt
	for _, r := range s.Lookup(index.BatchAttempts, id) {
		a, err := engine.Attempt(s, r.ID)
		if err != nil {
			return in, err
		}
		if a != nil {
			attempts = append(attempts, a)
		}
	}
	sort.Slice(attempts, func(i, j int) bool { return attempts[i].Generation > attempts[j].Generation })
	var room budget
	var left Omitted
	for _, a := range attempts {
		v := NewAttemptView(a)
		if a.ID == b.HeadAttemptID {
			in.HeadAttempt = &v
		}
		if room.fits(v, len(in.Attempts) == 0) {
			in.Attempts = append(in.Attempts, v)
		} else {
			left.Attempts++
		}
	}
	for _, aid := range b.ArtifactIDs {
		a, err := engine.Artifact(s, aid)
		if err != nil {
			return in, err
		}
		if a == nil {
			continue
		}
		if v := NewArtifactView(a); room.fits(v, len(in.Artifacts) == 0) {
			in.Artifacts = append(in.Artifacts, v)
		} else {
			left.Artifacts++
		}
	}
	for _, jid := range b.JobIDs {
		j, err := engine.Job(s, jid)
		if err != nil {
			return in, err
		}
		if j == nil {
			continue
		}
		if v := NewJobView(j, nil, nil); room.fits(v, len(in.Jobs) == 0) {
			in.Jobs = append(in.Jobs, v)
		} else {
			left.Jobs++
		}
	}
	if left != (Omitted{}) {
		in.Omitted = &left
	}
	return in, nil
}

// BatchFilter selects batches for Batches. State is a batch state, or
// one of the Batches* filters.
type BatchFilter struct {
	ThreadID string
	State    string
	After    string
	Limit    int
}

// The batch filters beside the batch states.
const (
	BatchesOpen        = "open"        // every open batch
	BatchesParked      = "parked"      // open and waiting for manual resolution
	BatchesUndelivered = "undelivered" // closed undelivered
)

// BatchPage is one page of batches in the order they opened; Next, when
// set, is the cursor of the following page.
type BatchPage struct {
	Batches []BatchView `json:"batches"`
	Next    string      `json:"next,omitempty"`
}

// Batches lists batches in the order they opened (log order), one page
// (see PageBytes) at a time. The cursor after is the id of the last batch
// of the page before: the batches listed are those opened after it.
func Batches(s engine.Snapshot, f BatchFilter) (BatchPage, error) {
	list, err := listAfter(s, events.KindBatch, "batch", f.After,
		func(b *aggregate.Batch) uint64 { return b.OpenedSeq },
		func(b *aggregate.Batch) bool {
			return (f.ThreadID == "" || b.SourceThreadID == f.ThreadID) &&
				(f.State == "" || string(b.State) == f.State || (f.State == BatchesOpen && b.Open()) || (f.State == BatchesParked && b.Parked()) ||
					(f.State == BatchesUndelivered && b.Undelivered && !b.Open()))
		})
	var page BatchPage
	page.Batches, page.Next = pageOf(list, f.Limit, NewBatchView, func(b *aggregate.Batch) string { return b.ID })
	return page, err
}

// Parked counts the batches waiting for manual resolution.
func Parked(s engine.Reader) int { return len(s.Lookup(index.Parked, "")) }

// Undelivered counts the batches cbth ever closed undelivered
// (command.UndeliveredReasons).
func Undelivered(s engine.Snapshot) int { return int(s.Count(aggregate.CountBatchUndelivered)) }

// ActiveJobs counts running jobs.
func ActiveJobs(s engine.Snapshot) int { return int(s.Count(aggregate.CountJobActive)) }

// StoredArtifacts returns the ids of artifacts whose files are kept.
func StoredArtifacts(s engine.Snapshot) (map[string]bool, error) {
	live := map[string]bool{}
	err := s.ForEach(events.KindArtifact, func(st aggregate.State) error {
		if st.Head().State == string(fsm.ArtifactStored) {
			live[st.Head().ID] = true
		}
		return nil
	})
	return live, err
}

// CtxTree returns a CortexFS tree's registrations, or nil.
func CtxTree(s engine.Reader, root string) (*aggregate.CtxTree, error) {
	return engine.CtxTree(s, root)
}

// CtxTreeRoots lists every registered tree.
func CtxTreeRoots(s engine.Snapshot) ([]string, error) {
	var roots []string
	err := s.ForEach(events.KindCtxTree, func(st aggregate.State) error {
		roots = append(roots, st.Head().ID)
		return nil
	})
	return roots, err
}

// InFlightAttempt is an attempt whose outcome or turn is still open: its
// barrier is written and it is either waiting for its call's answer
// (accept_pending) or tracking its accepted turn.
type InFlightAttempt struct {
	TargetKind events.Target
	Attempt    *aggregate.Attempt
}

// InFlight lists the attempts in flight, in thread order.
func InFlight(s engine.Reader) ([]InFlightAttempt, error) {
	var out []InFlightAttempt
	for _, r := range s.Scan(index.ThreadLive, "") {
		a, err := engine.Attempt(s, r.ID)
		if err != nil {
			return nil, err
		}
		if a == nil || (a.State != fsm.AttemptAcceptPending && !a.Tracking()) {
			continue
		}
		b, err := engine.Batch(s, a.BatchID)
		if err != nil {
			return nil, err
		}
		if b != nil {
			out = append(out, InFlightAttempt{TargetKind: b.TargetKind, Attempt: a})
		}
	}
	return out, nil
}

// Tracked counts the attempts observing an accepted turn whose deadline
// is after now, and returns the latest of those deadlines.
func Tracked(s engine.Reader, now time.Time) (n int, latest time.Time) {
	for _, r := range s.Scan(index.Tracking, "") {
		if at, ok := index.ParseTime(r.Key); ok && at.After(now) {
			n++
			latest = at // keys sort by deadline
		}
	}
	return n, latest
}

// Notices the park hook is run for.
const (
	NoticeParked      = "parked"             // the batch waits for manual resolution
	NoticeUndelivered = "closed_undelivered" // cbth closed it with its result never confirmed delivered
)

// ParkNotice is a batch whose operator notification is due: a parked
// batch, or one closed undelivered (command.UndeliveredReasons).
type ParkNotice struct {
	BatchID  string
	ThreadID string
	Notice   string // NoticeParked or NoticeUndelivered
	Reason   string // why it was parked, or its close reason
	JobIDs   []string
	Attempts int    // hook runs so far
	Version  uint64 // the batch's stream version, for the append
}

// ParkHooksDue lists the parked batches whose park hook is due by now.
func ParkHooksDue(s engine.Reader, now time.Time) ([]ParkNotice, error) {
	var out []ParkNotice
	for _, d := range s.DueBy(now) {
		if d.Name != index.DueParkHook {
			continue
		}
		b, err := engine.Batch(s, d.ID)
		if err != nil {
			return nil, err
		}
		if b == nil {
			continue
		}
		n := ParkNotice{BatchID: b.ID, ThreadID: b.SourceThreadID, Notice: NoticeParked, Reason: b.ReplayPolicyReason,
			JobIDs: b.JobIDs, Attempts: b.ParkNotifyAttempts, Version: b.Version}
		if b.Undelivered {
			n.Notice, n.Reason = NoticeUndelivered, b.CloseReason
		}
		out = append(out, n)
	}
	return out, nil
}
