package task

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
)

// Watchers (spec/tasks.md, "Watchers"): a task whose matching output
// lines wake its thread. The bounds below hold on every surface (the CLI,
// the MCP tools): SubmitTask refuses a watch outside them before anything
// is recorded or run.
const (
	// MaxPatterns bounds how many wake patterns one watcher has.
	MaxPatterns = 16
	// MaxPatternBytes bounds one pattern.
	MaxPatternBytes = 1 << 10
	// MaxWakesPerHour bounds a watcher's wakes_per_hour; at least 1.
	MaxWakesPerHour = 600
	// DefaultWakesPerHour is the bound when no rule or flag sets one.
	DefaultWakesPerHour = 6
	// DefaultLineMax is the per-line bound: a longer line is matched and
	// recorded on its first DefaultLineMax bytes.
	DefaultLineMax = 1 << 10
	// maxLineMax is the most line_max may be.
	maxLineMax = 64 << 10
	// UpdateKind is the task_kind of a watcher's update jobs.
	UpdateKind = "watch"
)

// The outcomes of MatchTask.
const (
	OutcomeWoke   engine.Outcome = "woke"    // an update was made
	OutcomeFolded engine.Outcome = "folded"  // recorded, for the next update
	OutcomeNotDue engine.Outcome = "not_due" // nothing to record, or no wake allowed yet
)

// CheckWatch refuses a watch outside the bounds: a pattern that does not
// compile (EINVAL), one over MaxPatternBytes (EMSGSIZE), more than
// MaxPatterns (EINVAL), a wakes_per_hour that is not 1 to
// MaxWakesPerHour (EINVAL), a bad line_max.
func CheckWatch(w events.TaskWatch) error {
	_, err := Compile(w.Patterns)
	if err != nil {
		return err
	}
	if w.WakesPerHour < 1 || w.WakesPerHour > MaxWakesPerHour {
		return errs.New(errs.EINVAL, "the wake bound is %d a hour; it must be between 1 and %d", w.WakesPerHour, MaxWakesPerHour)
	}
	if w.LineMax < 64 || w.LineMax > maxLineMax {
		return errs.New(errs.EINVAL, "line_max is %d bytes; it must be between 64 and %d", w.LineMax, maxLineMax)
	}
	return nil
}

// Compile compiles wake patterns (Go's RE2 syntax: matching takes time
// linear in the line, whatever the pattern), refusing them as CheckWatch
// does.
func Compile(patterns []string) ([]*regexp.Regexp, error) {
	if len(patterns) > MaxPatterns {
		return nil, errs.New(errs.EINVAL, "%d wake patterns; a watcher takes at most %d", len(patterns), MaxPatterns)
	}
	out := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		switch {
		case len(p) > MaxPatternBytes:
			return nil, errs.New(errs.EMSGSIZE, "wake pattern %d is %d bytes, over the %d byte limit", i+1, len(p), MaxPatternBytes)
		case p == "":
			return nil, errs.New(errs.EINVAL, "wake pattern %d is empty (it would match every line)", i+1)
		case !utf8.ValidString(p) || strings.ContainsRune(p, 0):
			return nil, errs.New(errs.EINVAL, "wake pattern %d is not text", i+1)
		}
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, errs.New(errs.EINVAL, "wake pattern %d does not compile: %s", i+1, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
		out[i] = re
	}
	return out, nil
}

// WatchState is what MatchTask leaves a watcher with: Folded matching
// lines that wait for a wake, the earliest at NextWake (on the engine
// clock). Waits is false when nothing waits, or when no update can be
// made any more (the watcher's job was settled otherwise).
type WatchState struct {
	Folded   int64
	NextWake time.Time
	Waits    bool
}

// MatchTask records matching lines of a watcher: as an update for its
// thread (task.woke, with the update's job submitted and made ready in
// the same append) while fewer than wakes_per_hour updates were made in
// the hour up to now, and as folded lines (task.matched) otherwise.
// Everything folded before goes into the next update. With no lines it
// makes the update of the folded ones once the bound allows it (the
// daemon asks when an hour has passed since the wake that spent it).
// The hour is counted on the times the log holds, so replay decides
// nothing again and the same log gives the same updates.
type MatchTask struct {
	engine.Answers[WatchState]

	Config  command.DeliveryConfig
	TaskID  string
	Matches events.TaskMatches
}

// Decide implements engine.Decider.
func (c MatchTask) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	t, err := task(v, c.TaskID)
	if err != nil {
		return engine.Decision{}, err
	}
	if !t.Watcher() {
		return engine.Decision{}, errs.New(errs.EINVAL, "task %s is not a watcher", c.TaskID)
	}
	if t.State != fsm.TaskRunning && t.State != fsm.TaskStopping {
		return engine.Decision{}, errs.New(errs.ESTATE, "task %s is %s; only a running watcher records matches", c.TaskID, t.State)
	}
	if err := checkMatches(c.Matches, t.Watch); err != nil {
		return engine.Decision{}, err
	}
	j, err := command.Existing(v, engine.Job, "job", t.JobID)
	if err != nil {
		return engine.Decision{}, err
	}
	all := t.Folded.Add(c.Matches)
	live := j.State == fsm.JobRunning
	if all.Count > 0 && live && t.CanWake(now) {
		n := t.Wakes + 1
		meta, _ := json.Marshal(map[string]any{"watch": map[string]any{"task_id": t.ID, "update": n}})
		ready := command.SubmitReady{Config: c.Config, Result: wakeText(t, all), Job: command.SubmitJob{
			Target: command.Target(j.TargetKind), ThreadID: j.SourceThreadID, TaskKind: UpdateKind,
			Summary:  cut(fmt.Sprintf("update %d of watcher %s: %s", n, t.ID, j.TaskSummary), 1024),
			Metadata: meta, Policy: j.DeliveryPolicy, DeliveryTarget: j.DeliveryTarget}}
		d, err := ready.Decide(v, now)
		if err != nil {
			return engine.Decision{}, err
		}
		cause := events.WakeMatch
		if c.Matches.Count == 0 {
			cause = events.WakeSlot
		}
		woke := &events.TaskWoke{Update: n, JobID: engine.AnswerOf(ready, d), Cause: cause, TaskMatches: all}
		after := *t
		after.WakeTimes = append(append([]time.Time(nil), t.WakeTimes...), now)
		return c.Answer(engine.Decision{Outcome: OutcomeWoke, Emits: append([]engine.Emit{{Stream: taskStream(t.ID), Payload: woke}}, d.Emits...)},
			WatchState{NextWake: after.NextWake()}), nil
	}
	state := WatchState{Folded: all.Count, NextWake: t.NextWake(), Waits: all.Count > 0 && live}
	if c.Matches.Count == 0 {
		return c.Answer(engine.Decision{Outcome: OutcomeNotDue}, state), nil
	}
	return c.Answer(engine.Decision{Outcome: OutcomeFolded, Emits: []engine.Emit{{Stream: taskStream(t.ID),
		Payload: &events.TaskMatched{TaskMatches: c.Matches}}}}, state), nil
}

// checkMatches refuses matches the watcher could not have seen.
func checkMatches(m events.TaskMatches, w *events.TaskWatch) error {
	n := len(m.Lines)
	if m.Count < 0 || int64(n) > m.Count || (m.Count > 0 && n == 0) || n > 1+events.ShownLines {
		return errs.New(errs.EINVAL, "%d matching lines shown for a count of %d", n, m.Count)
	}
	for i, l := range m.Lines {
		switch {
		case l.Pattern < 0 || l.Pattern >= len(w.Patterns):
			return errs.New(errs.EINVAL, "line %d matched pattern %d; the watcher has %d", l.Line, l.Pattern, len(w.Patterns))
		case len(l.Text) > w.LineMax || !utf8.ValidString(l.Text):
			return errs.New(errs.EINVAL, "line %d is not text of at most %d bytes", l.Line, w.LineMax)
		case l.Line < 1 || (i > 0 && l.Line <= m.Lines[i-1].Line):
			return errs.New(errs.EINVAL, "matching lines out of order")
		}
	}
	return nil
}

// wakeText is an update as the thread reads it: which watcher and which
// pattern, the lines, and how many more were folded in.
func wakeText(t *aggregate.Task, m events.TaskMatches) string {
	var b strings.Builder
	fmt.Fprintf(&b, "watcher %s (`%s`)", t.ID, t.CommandLine())
	first := m.Lines[0]
	if m.Count == 1 {
		fmt.Fprintf(&b, " matched %s on line %d: %s (no other matching line folded in)", patternOf(t, first.Pattern), first.Line, lineText(first))
	} else {
		fmt.Fprintf(&b, ": %s, %s folded into this update; the first %s", plural.Count(m.Count, "matching line", "matching lines"),
			plural.Count(m.Count-1, "line", "lines"), shownLine(t, first))
		if len(m.Lines) > 1 {
			b.WriteString("; the last: ")
			for i, l := range m.Lines[1:] {
				if i > 0 {
					b.WriteString(" | ")
				}
				b.WriteString(shownLine(t, l))
			}
		}
	}
	fmt.Fprintf(&b, ". Read its output with task_output (task_id %s, from_line %d)", t.ID, first.Line)
	return b.String()
}

// foldedText says what of the folded lines went into a final update.
func foldedText(t *aggregate.Task) string {
	m := t.Folded
	if m.Count == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s since its last wake folded in: ", plural.Count(m.Count, "matching line", "matching lines"))
	for i, l := range m.Lines {
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(shownLine(t, l))
	}
	return b.String()
}

// shownLine is one matching line: its number, pattern and text.
func shownLine(t *aggregate.Task, l events.TaskLine) string {
	return fmt.Sprintf("line %d %s: %s", l.Line, patternOf(t, l.Pattern), lineText(l))
}

// patternOf shows pattern i of the watcher, cut to a short excerpt.
func patternOf(t *aggregate.Task, i int) string {
	if t.Watch == nil || i < 0 || i >= len(t.Watch.Patterns) {
		return "/?/"
	}
	return "/" + cut(t.Watch.Patterns[i], 80) + "/"
}

func lineText(l events.TaskLine) string {
	s := strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return -1
		}
		return r
	}, l.Text)
	if l.Cut {
		s += "…"
	}
	return s
}

// watchEnd is a watcher's final update: how it ended (the sentence a
// task's job gets), the wakes it made, what was folded since the last,
// and the last lines of its output.
func watchEnd(t *aggregate.Task, how, tail string) string {
	s := fmt.Sprintf("watcher %s: %s; it woke this thread %s (%s in all)", t.ID, how, plural.Count(t.Wakes, "time", "times"),
		plural.Count(t.Matched, "matching line", "matching lines"))
	if f := foldedText(t); f != "" {
		s += "; " + f
	}
	if lines := lastLines(tail, tailLines); lines != "" {
		s += "; last output: " + lines
	}
	return s
}

// tailLines is how many of the output's last lines a final update quotes.
const tailLines = 5

// lastLines are the last n non-blank lines of an output tail, each cut to
// the excerpt bound, joined with " | ".
func lastLines(tail string, n int) string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(tail, " \t\r\n"), "\n") {
		if l = lastLine(l); l != "" {
			out = append(out, l)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, " | ")
}

// settleWatcher completes a watcher's job, whatever way the watcher
// ended: the end is its final update, which the thread gets like any
// other (a job that failed would reach no one). A job already settled
// otherwise keeps its state.
func settleWatcher(c command.DeliveryConfig, v engine.View, now time.Time, t *aggregate.Task, text string, art *command.Ingested) ([]engine.Emit, error) {
	j, err := command.Existing(v, engine.Job, "job", t.JobID)
	if err != nil {
		return nil, err
	}
	if j.State != fsm.JobRunning {
		return keepArtifact(c, now, j.ID, art), nil
	}
	d, err := command.CompleteJob{Config: c, JobID: j.ID, Summary: cut(text, 8<<10), Artifact: art}.Decide(v, now)
	return d.Emits, err
}
