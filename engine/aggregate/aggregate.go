// Package aggregate holds the current-state type of every aggregate and the
// pure apply function that folds one event into it. Apply checks each event
// against the aggregate's state machine, so an illegal event can never
// produce a state, whether it arrives on write or on replay.
package aggregate

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// State is the current state of one aggregate.
type State interface {
	// Head is the header, whatever the aggregate's state type.
	Head() Head
	// stamp is the part of the header the fold writes besides the state.
	stamp() *record
	// setHead sets the id and the state, named as the machines name it.
	setHead(id, state string)
	// mutate folds a payload already validated by the machine into the
	// state's fields.
	mutate(e *events.Envelope, p events.Payload)
}

// Header is common to every aggregate. S is the type of the aggregate's
// states (engine/fsm: fsm.JobState for a job, ...), so State compares
// only with that aggregate's state constants.
type Header[S ~string] struct {
	ID    string `json:"id"`
	State S      `json:"state"`
	record
}

// record is the part of Header that does not depend on the state type:
// where the aggregate's events are and when they were recorded.
type record struct {
	Version   uint64    `json:"version"`
	FirstSeq  uint64    `json:"first_seq"`
	LastSeq   uint64    `json:"last_seq"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Head is what every aggregate's header says, its state as a string: for
// readers that handle aggregates of any kind.
type Head struct {
	ID      string
	State   string
	Version uint64
}

// Head implements State.
func (h *Header[S]) Head() Head { return Head{ID: h.ID, State: string(h.State), Version: h.Version} }

func (h *Header[S]) stamp() *record { return &h.record }

// setHead implements State.
func (h *Header[S]) setHead(id, state string) { h.ID, h.State = id, S(state) }

// Deadline is a moment at which the sweep must look at an aggregate.
type Deadline struct {
	Name string
	At   time.Time
}

// IndexEntry is a secondary index key derived from a state.
type IndexEntry struct {
	Index string
	Key   string
}

// Deadliner is implemented by states that have deadlines.
type Deadliner interface {
	Deadlines() []Deadline
}

// Indexer is implemented by states that have secondary index entries.
type Indexer interface {
	Indexes() []IndexEntry
}

// Counter is implemented by states that count towards named totals. A
// total costs one small value however many states it counts, where an
// index entry per state would grow with them.
type Counter interface {
	Counts() []string
}

// New returns an empty state of kind k.
func New(k events.Kind, id string) (State, error) {
	var s State
	switch k {
	case events.KindJob:
		s = &Job{}
	case events.KindBatch:
		s = &Batch{}
	case events.KindAttempt:
		s = &Attempt{}
	case events.KindArtifact:
		s = &Artifact{}
	case events.KindBinding:
		s = &Binding{}
	case events.KindInstallation:
		s = &Installation{}
	case events.KindSession:
		s = &Session{}
	case events.KindCtxSession:
		s = &CtxSession{}
	case events.KindCursor:
		s = &Cursor{}
	case events.KindCtxTree:
		s = &CtxTree{}
	case events.KindAppServer:
		s = &AppServer{}
	case events.KindTask:
		s = &Task{}
	case events.KindGatewayRoute:
		s = &GatewayRoute{}
	case events.KindGatewayStream:
		s = &GatewayStream{}
	case events.KindMCP:
		s = &MCPThread{}
	case events.KindThread:
		s = &Thread{}
	default:
		return nil, errs.New(errs.EINTERNAL, "unknown aggregate kind %q", k)
	}
	s.setHead(id, fsm.None)
	return s, nil
}

// Apply folds e (with its decoded payload p) into s and returns the new
// state. s may be nil for an aggregate that does not exist yet. s is not
// modified when Apply fails; it may be modified in place on success.
func Apply(ms *fsm.Machines, s State, e *events.Envelope, p events.Payload) (State, error) {
	if s == nil {
		var err error
		if s, err = New(e.Stream.Kind, e.Stream.ID); err != nil {
			return nil, err
		}
	}
	hd, h := s.Head(), s.stamp()
	if e.Version != h.Version+1 {
		return nil, errs.New(errs.ECONFLICT, "%s: event version %d does not follow %d", e.Stream, e.Version, h.Version)
	}
	to, err := ms.Step(e.Stream.Kind, hd.State, fsm.EventName(p))
	if err != nil {
		return nil, fmt.Errorf("%s seq %d: %w", e.Stream, e.Seq, err)
	}
	if hd.State == fsm.None {
		h.CreatedAt, h.FirstSeq = e.RecordedAt, e.Seq
	}
	s.mutate(e, p)
	s.setHead(hd.ID, to)
	h.Version = e.Version
	h.LastSeq = e.Seq
	h.UpdatedAt = e.RecordedAt
	return s, nil
}

// Encode is the stored form of a state: deterministic JSON, so rebuilding a
// projection from the log gives byte-identical values.
func Encode(s State) ([]byte, error) { return json.Marshal(s) }

// Decode reads a stored state of kind k.
func Decode(k events.Kind, b []byte) (State, error) {
	s, err := New(k, "")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, errs.Wrap(errs.ECORRUPT, err, "decode %s state", k)
	}
	return s, nil
}

// Clone returns a deep copy of s, so a command can change it without
// touching the committed state it came from.
func Clone(s State) State {
	switch s := s.(type) {
	case *Job:
		c := *s
		c.DeliveryTarget = clonePtr(s.DeliveryTarget)
		return &c
	case *Batch:
		c := *s
		c.JobIDs, c.ArtifactIDs = slices.Clone(s.JobIDs), slices.Clone(s.ArtifactIDs)
		c.DeliveryTarget = clonePtr(s.DeliveryTarget)
		if s.BoundaryRecoveryEnvelope != nil {
			env := *s.BoundaryRecoveryEnvelope
			env.ArtifactManifestRefs, env.ArtifactIDs = slices.Clone(env.ArtifactManifestRefs), slices.Clone(env.ArtifactIDs)
			c.BoundaryRecoveryEnvelope = &env
		}
		return &c
	case *Attempt:
		c := *s
		c.RejectedRequestIDs = slices.Clone(s.RejectedRequestIDs)
		c.RelayMarkers = slices.Clone(s.RelayMarkers)
		return &c
	case *Artifact:
		c := *s
		c.OpenBatchIDs = slices.Clone(s.OpenBatchIDs)
		return &c
	case *Binding:
		c := *s
		c.RelayMarkers = slices.Clone(s.RelayMarkers)
		return &c
	case *Installation:
		c := *s
		c.RelayScanners = maps.Clone(s.RelayScanners) // mutate replaces it anyway
		c.MCPValidation, c.MCPWriteback = clonePtr(s.MCPValidation), clonePtr(s.MCPWriteback)
		c.QueueValidation, c.QueueWriteback, c.QueueFailure = clonePtr(s.QueueValidation), clonePtr(s.QueueWriteback), clonePtr(s.QueueFailure)
		return &c
	case *Session:
		c := *s
		c.DriftDimensions = slices.Clone(s.DriftDimensions)
		return &c
	case *AppServer:
		c := *s
		c.ProbeMissing = slices.Clone(s.ProbeMissing)
		return &c
	case *CtxSession:
		c := *s
		return &c
	case *Cursor:
		c := *s
		return &c
	case *CtxTree:
		c := *s
		c.Objects, c.Aliases = slices.Clone(s.Objects), slices.Clone(s.Aliases)
		return &c
	case *Task:
		c := *s
		c.Argv = slices.Clone(s.Argv)
		c.cloneWatch()
		return &c
	case *GatewayRoute:
		c := *s
		return &c
	case *GatewayStream:
		c := *s
		c.Missing = slices.Clone(s.Missing)
		return &c
	case *MCPThread:
		c := *s
		return &c
	case *Thread:
		c := *s
		return &c
	}
	panic(fmt.Sprintf("aggregate: Clone of unknown state %T", s))
}

// clonePtr is a copy of what p points at (nil for nil): a pointer field
// of a state shared with its clone would let a command change the
// committed state through it.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// KindOf returns the aggregate kind of a state.
func KindOf(s State) events.Kind {
	switch s.(type) {
	case *Job:
		return events.KindJob
	case *Batch:
		return events.KindBatch
	case *Attempt:
		return events.KindAttempt
	case *Artifact:
		return events.KindArtifact
	case *Binding:
		return events.KindBinding
	case *Installation:
		return events.KindInstallation
	case *Session:
		return events.KindSession
	case *CtxSession:
		return events.KindCtxSession
	case *Cursor:
		return events.KindCursor
	case *CtxTree:
		return events.KindCtxTree
	case *AppServer:
		return events.KindAppServer
	case *Task:
		return events.KindTask
	case *GatewayRoute:
		return events.KindGatewayRoute
	case *GatewayStream:
		return events.KindGatewayStream
	case *MCPThread:
		return events.KindMCP
	case *Thread:
		return events.KindThread
	}
	return ""
}

func appendUnique(list []string, add ...string) []string {
	for _, a := range add {
		dup := false
		for _, x := range list {
			if x == a {
				dup = true
				break
			}
		}
		if !dup {
			list = append(list, a)
		}
	}
	return list
}

func remove(list []string, v string) []string {
	out := list[:0:0]
	for _, x := range list {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

// textOf extracts the text of a message content value: a JSON string or a
// list of {"type":"text","text":...} parts.
func textOf(raw events.RawJSON) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var out string
	for _, p := range parts {
		if p.Type == "text" {
			out += p.Text
		}
	}
	return out
}

// Counter names used by the states below.
const (
	CountJobActive        = "job.active"               // running jobs
	CountBatchUndelivered = "batch.closed_undelivered" // batches closed undelivered, ever
)
