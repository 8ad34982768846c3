package query

import (
	"time"

	"github.com/cbth-dev/cbth/engine/aggregate"
)

// TaskWatchView is a watcher as task inspect shows it: its patterns and
// bound, the updates it made, the matching lines it saw, those folded
// since its last update and, while they wait on the hour's bound, the
// earliest time they may go.
type TaskWatchView struct {
	WakeOn       []string   `json:"wake_on"`
	WakesPerHour int        `json:"wakes_per_hour"`
	LineMax      int        `json:"line_max"`
	Wakes        int        `json:"wakes"`
	Matched      int64      `json:"matched"`
	Folded       int64      `json:"folded"`
	NextWakeAt   *time.Time `json:"next_wake_at"`
}

// NewTaskWatchView renders a task's watch; nil for a plain task.
func NewTaskWatchView(t *aggregate.Task) *TaskWatchView {
	if !t.Watcher() {
		return nil
	}
	v := &TaskWatchView{WakeOn: t.Watch.Patterns, WakesPerHour: t.Watch.WakesPerHour, LineMax: t.Watch.LineMax,
		Wakes: t.Wakes, Matched: t.Matched, Folded: t.Folded.Count}
	if v.WakeOn == nil {
		v.WakeOn = []string{}
	}
	if t.Folded.Count > 0 && t.Live() {
		v.NextWakeAt = opt(t.NextWake())
	}
	return v
}
