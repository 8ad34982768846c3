package home

import (
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Task holds the task runner's bounds (cbth task run).
type Task struct {
	// MaxRunning is how many tasks run at once; more wait queued.
	MaxRunning int `toml:"max_running"`
	// OutputTail is how many of the last output bytes a task keeps
	// inline in its record.
	OutputTail int64 `toml:"output_tail"`
	// SpoolMax caps the output spooled to disk; output past it is
	// counted and only its tail kept.
	SpoolMax int64 `toml:"spool_max"`
	// KillGrace is how long a stopped task has between TERM and KILL.
	KillGrace Duration `toml:"kill_grace"`
}

// The most a task may keep inline: its tail lives in the log.
const maxOutputTail = 64 << 10

// TaskDefaults are the task runner's built-in bounds.
func TaskDefaults() Task {
	return Task{MaxRunning: 16, OutputTail: 64 << 10, SpoolMax: 64 << 20, KillGrace: Duration{5 * time.Second}}
}

// checkTask refuses task bounds that make no sense, naming the key. The
// default spool cap gives way to a lower max_result_bytes, since the
// spool becomes the job's result; a cap set above it is refused.
func (h Home) checkTask(c *Config) error {
	t := &c.Task
	if t.SpoolMax == TaskDefaults().SpoolMax && t.SpoolMax > c.MaxResultBytes {
		t.SpoolMax = c.MaxResultBytes
	}
	switch {
	case t.MaxRunning < 1 || t.MaxRunning > 1024:
		return errs.New(errs.EINVAL, "%s: [task] max_running must be between 1 and 1024, not %d", h.Config(), t.MaxRunning)
	case t.OutputTail < 1 || t.OutputTail > maxOutputTail:
		return errs.New(errs.EINVAL, "%s: [task] output_tail must be between 1 and %d bytes, not %d", h.Config(), maxOutputTail, t.OutputTail)
	case t.SpoolMax < 1:
		return errs.New(errs.EINVAL, "%s: [task] spool_max must be at least 1 byte, not %d", h.Config(), t.SpoolMax)
	case t.SpoolMax > c.MaxResultBytes:
		return errs.New(errs.EINVAL, "%s: [task] spool_max (%d) must not exceed max_result_bytes (%d): the spool becomes the job's result", h.Config(), t.SpoolMax, c.MaxResultBytes)
	case t.KillGrace.Duration <= 0 || t.KillGrace.Duration > time.Hour:
		return errs.New(errs.EINVAL, "%s: [task] kill_grace must be positive and at most 1h, not %s", h.Config(), t.KillGrace.Duration)
	}
	return nil
}
