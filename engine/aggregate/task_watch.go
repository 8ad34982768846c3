package aggregate

import (
	"slices"
	"time"

	"github.com/cbth-dev/cbth/events"
)

// taskWakes is what a watcher's events record (events/watch.go): its
// updates so far, the times of the latest ones (the hour's bound is
// decided from them, on the engine clock's times the events carry), and
// the matches folded since its last update.
type taskWakes struct {
	// Wakes counts the watcher's updates (task.woke); its final update
	// is not one.
	Wakes int `json:"wakes,omitempty"`
	// WakeTimes are the times of the latest updates, at most
	// wakes_per_hour of them, oldest first.
	WakeTimes []time.Time `json:"wake_times,omitempty"`
	// Matched counts every matching line seen.
	Matched int64 `json:"matched,omitempty"`
	// Folded are the matching lines seen since the last update that no
	// update carries yet.
	Folded events.TaskMatches `json:"folded,omitzero"`
}

// Watcher reports whether the task is a watcher.
func (t *Task) Watcher() bool { return t.Watch != nil }

// NextWake is the earliest time the hour's bound lets the watcher wake
// again: the zero time when it may now, whatever the time.
func (t *Task) NextWake() time.Time {
	if t.Watch == nil {
		return time.Time{}
	}
	n := t.Watch.WakesPerHour
	if n <= 0 || len(t.WakeTimes) < n {
		return time.Time{}
	}
	return t.WakeTimes[len(t.WakeTimes)-n].Add(time.Hour)
}

// CanWake reports whether the watcher may make an update at now: fewer
// than wakes_per_hour updates in the hour up to now.
func (t *Task) CanWake(now time.Time) bool { return t.Watch != nil && !now.Before(t.NextWake()) }

func (t *Task) matched(p *events.TaskMatched) {
	t.Matched += p.Count
	t.Folded = t.Folded.Add(p.TaskMatches)
}

// woke takes an update: it carries every folded line and the new ones.
func (t *Task) woke(e *events.Envelope, p *events.TaskWoke) {
	t.Matched += p.Count - t.Folded.Count
	t.Folded = events.TaskMatches{}
	t.Wakes = p.Update
	t.WakeTimes = append(t.WakeTimes, e.RecordedAt)
	if t.Watch != nil && len(t.WakeTimes) > t.Watch.WakesPerHour {
		t.WakeTimes = slices.Clone(t.WakeTimes[len(t.WakeTimes)-t.Watch.WakesPerHour:])
	}
}

// ended: the final update carried what was folded.
func (t *Task) ended() { t.Folded = events.TaskMatches{} }

func (t *Task) cloneWatch() {
	if t.Watch != nil {
		w := *t.Watch
		w.Patterns = slices.Clone(w.Patterns)
		t.Watch = &w
	}
	t.WakeTimes = slices.Clone(t.WakeTimes)
	t.Folded.Lines = slices.Clone(t.Folded.Lines)
}
