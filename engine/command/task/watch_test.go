package task_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/task"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

func watch(n int, patterns ...string) *events.TaskWatch {
	return &events.TaskWatch{Patterns: patterns, WakesPerHour: n, LineMax: task.DefaultLineMax}
}

func (te taskEnv) watcher(w *events.TaskWatch) task.TaskRef {
	te.t.Helper()
	ref, _ := enginetest.Answer[task.TaskRef](te.t, te.e, engine.Meta{Actor: events.ActorAdapter}, task.SubmitTask{
		Job:  command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "watch", Summary: "the dev server", Policy: events.FailClosedPolicy},
		Argv: []string{"sh", "-c", "serve"}, Path: "/bin/sh", Cwd: "/tmp", Watch: w,
	})
	te.must(task.StartTask{TaskID: ref.TaskID, PID: 42, DaemonPID: 7})
	return ref
}

// lines are matches of consecutive lines from line from, of pattern pat.
func lines(from int64, pat int, texts ...string) events.TaskMatches {
	var m events.TaskMatches
	for i, s := range texts {
		m = m.Add(events.TaskMatches{Count: 1, Lines: []events.TaskLine{{Line: from + int64(i), Pattern: pat, Text: s}}})
	}
	return m
}

func (te taskEnv) match(id string, m events.TaskMatches) (engine.Outcome, task.WatchState) {
	te.t.Helper()
	st, res := enginetest.Answer[task.WatchState](te.t, te.e, engine.Meta{Actor: events.ActorAdapter}, task.MatchTask{Config: cfg, TaskID: id, Matches: m})
	return res.Outcome, st
}

// readyJobs are the thread's jobs of kind kind that are ready, in order.
func (te taskEnv) readyJobs(kind string) []*aggregate.Job {
	var out []*aggregate.Job
	_ = te.e.Read(func(r engine.Snapshot) error {
		return r.ForEachAfter(events.KindJob, "", func(s aggregate.State) error {
			if j := s.(*aggregate.Job); j.TaskKind == kind && j.State == fsm.JobReady {
				out = append(out, j)
			}
			return nil
		})
	})
	return out
}

// The hour's bound is decided on the engine clock, from the times of the
// wakes the log holds: two wakes, then lines fold; 59 minutes later the
// bound still holds; an hour after the first wake the folded lines go as
// one update, the first and the last three shown and the count said;
// the end is a final update with what was folded since.
func TestWatcherWakesWithinTheHourBound(t *testing.T) {
	clock := engine.NewManualClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	te := taskEnv{t, enginetest.Open(t, t.TempDir()+"/cbth.db", engine.Options{Clock: clock, NoSync: true})}
	ref := te.watcher(watch(2, "READY", "ERROR"))

	if out, _ := te.match(ref.TaskID, lines(3, 0, "READY on :8080")); out != task.OutcomeWoke {
		t.Fatalf("the first match: %s", out)
	}
	clock.Advance(time.Minute)
	if out, st := te.match(ref.TaskID, lines(9, 1, "ERROR one")); out != task.OutcomeWoke || !st.NextWake.Equal(clock.Now().Add(59*time.Minute)) {
		t.Fatalf("the second match: %s, next wake %s", out, st.NextWake)
	}
	if out, st := te.match(ref.TaskID, lines(10, 1, "ERROR two", "ERROR three", "ERROR four", "ERROR five", "ERROR six")); out != task.OutcomeFolded || st.Folded != 5 || !st.Waits {
		t.Fatalf("over the bound: %s %+v", out, st)
	}
	clock.Advance(58 * time.Minute)
	if out, _ := te.match(ref.TaskID, events.TaskMatches{}); out != task.OutcomeNotDue {
		t.Fatalf("59 minutes after the first wake: %s", out)
	}
	clock.Advance(time.Minute)
	if out, _ := te.match(ref.TaskID, events.TaskMatches{}); out != task.OutcomeWoke {
		t.Fatalf("an hour after the first wake: %s", out)
	}
	ups := te.readyJobs(task.UpdateKind)
	if len(ups) != 3 {
		t.Fatalf("%d updates, want 3", len(ups))
	}
	for i, want := range []string{"matched /READY/ on line 3: READY on :8080", "matched /ERROR/ on line 9: ERROR one",
		"5 matching lines, 4 lines folded into this update; the first line 10 /ERROR/: ERROR two; the last: line 12 /ERROR/: ERROR four | line 13 /ERROR/: ERROR five | line 14 /ERROR/: ERROR six"} {
		if !strings.Contains(ups[i].ResultSummary, want) || !strings.Contains(ups[i].ResultSummary, "watcher "+ref.TaskID) {
			t.Errorf("update %d: %q, want %q", i+1, ups[i].ResultSummary, want)
		}
		if ups[i].SourceThreadID != "T" || ups[i].TargetKind != "debug" || ups[i].BatchID == "" {
			t.Errorf("update %d is not in the thread's FIFO: %+v", i+1, ups[i])
		}
	}
	tk := te.task(ref.TaskID)
	if tk.Wakes != 3 || tk.Matched != 7 || tk.Folded.Count != 0 {
		t.Fatalf("task: wakes %d matched %d folded %+v", tk.Wakes, tk.Matched, tk.Folded)
	}

	// The bound is spent again (wakes at 10:01 and 11:00): a line folds,
	// and the end carries it.
	te.match(ref.TaskID, lines(20, 1, "ERROR seven"))
	te.must(task.FinishTask{Config: cfg, TaskID: ref.TaskID, Exit: task.TaskExit{ExitCode: 1},
		Output: events.TaskOutput{OutputBytes: 30, SpoolBytes: 30, Tail: "a\nb\nERROR seven\nbye\n"}})
	j := te.job(ref.JobID)
	for _, want := range []string{"watcher " + ref.TaskID, "exited with status 1", "woke this thread 3 times (8 matching lines in all)",
		"1 matching line since its last wake folded in: line 20 /ERROR/: ERROR seven", "last output: a | b | ERROR seven | bye"} {
		if !strings.Contains(j.ResultSummary, want) {
			t.Errorf("final update %q lacks %q", j.ResultSummary, want)
		}
	}
	if j.State != fsm.JobReady {
		t.Errorf("a watcher that exited 1 left its job %s; its end must reach the thread", j.State)
	}
	if _, err := te.exec(task.MatchTask{Config: cfg, TaskID: ref.TaskID, Matches: lines(30, 0, "late")}); errs.CodeOf(err) != errs.ESTATE {
		t.Errorf("a match after the end: %v", err)
	}
	// Replay decides nothing again: the log gives the same state.
	if d := enginetest.ReplayDiff(t, te.e, 5); len(d) > 0 {
		t.Errorf("replay differs: %v", d)
	}
}

// A watcher stopped (task cancel, watch_stop) ends with one final update;
// one whose job was cancelled wakes no one any more; one lost with its
// daemon is reported interrupted, with what it had seen.
func TestWatcherEnds(t *testing.T) {
	te := newTaskEnv(t)
	ref := te.watcher(watch(6, "x"))
	te.match(ref.TaskID, lines(1, 0, "x1"))
	te.must(task.StopTask{TaskID: ref.TaskID, Reason: task.StopCancel})
	te.must(task.FinishTask{Config: cfg, TaskID: ref.TaskID, Exit: task.TaskExit{ExitCode: -1, Signal: "TERM"}})
	if j := te.job(ref.JobID); j.State != fsm.JobReady || !strings.Contains(j.ResultSummary, "cancelled") || !strings.Contains(j.ResultSummary, "woke this thread 1 time") {
		t.Errorf("stopped watcher's job: %s %q", j.State, j.ResultSummary)
	}

	ref = te.watcher(watch(6, "x"))
	te.must(command.CancelJob{Config: cfg, JobID: ref.JobID, Reason: "by hand"})
	if out, st := te.match(ref.TaskID, lines(1, 0, "x1")); out != task.OutcomeFolded || st.Waits {
		t.Errorf("a match after the job was cancelled: %s %+v", out, st)
	}

	ref = te.watcher(watch(1, "x"))
	te.match(ref.TaskID, lines(1, 0, "x1"))
	te.match(ref.TaskID, lines(2, 0, "x2", "x3"))
	te.must(task.LoseTask{Config: cfg, TaskID: ref.TaskID, Reason: "the daemon that ran this task (pid 7) ended",
		Output: events.TaskOutput{OutputBytes: 9, SpoolBytes: 9, Tail: "x1\nx2\nx3\n"}})
	j := te.job(ref.JobID)
	for _, want := range []string{"interrupted: the daemon that ran this task (pid 7) ended", "woke this thread 1 time (3 matching lines in all)",
		"2 matching lines since its last wake folded in: line 2 /x/: x2 | line 3 /x/: x3"} {
		if j.State != fsm.JobReady || !strings.Contains(j.ResultSummary, want) {
			t.Errorf("lost watcher's job %s %q lacks %q", j.State, j.ResultSummary, want)
		}
	}
}

// Every bad watch is refused with its stable code, and nothing is
// appended.
func TestWatchBadInput(t *testing.T) {
	te := newTaskEnv(t)
	many := make([]string, task.MaxPatterns+1)
	for i := range many {
		many[i] = fmt.Sprint("p", i)
	}
	for _, c := range []struct {
		name string
		w    *events.TaskWatch
		code errs.Code
	}{
		{"a pattern that does not compile", watch(6, "ok", "(unclosed"), errs.EINVAL},
		{"a pattern over 1 KiB", watch(6, strings.Repeat("a", task.MaxPatternBytes+1)), errs.EMSGSIZE},
		{"more than 16 patterns", watch(6, many...), errs.EINVAL},
		{"an empty pattern", watch(6, ""), errs.EINVAL},
		{"a wake bound of 0", watch(0, "x"), errs.EINVAL},
		{"a wake bound over 600", watch(task.MaxWakesPerHour+1, "x"), errs.EINVAL},
		{"a bad line bound", &events.TaskWatch{Patterns: []string{"x"}, WakesPerHour: 6, LineMax: 1}, errs.EINVAL},
	} {
		head := te.e.Head()
		_, err := te.exec(task.SubmitTask{Job: command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "k", Summary: "s"},
			Argv: []string{"sh"}, Path: "/bin/sh", Cwd: "/tmp", Watch: c.w})
		if errs.CodeOf(err) != c.code || te.e.Head() != head {
			t.Errorf("%s: %v (log %d -> %d), want %s and nothing appended", c.name, err, head, te.e.Head(), c.code)
		}
	}
	// The bounds themselves are allowed.
	full := make([]string, task.MaxPatterns)
	for i := range full {
		full[i] = strings.Repeat("b", task.MaxPatternBytes-1) + fmt.Sprint(i%10)
	}
	if _, err := te.exec(task.SubmitTask{Job: command.SubmitJob{Target: "debug", ThreadID: "T", TaskKind: "k", Summary: "s"},
		Argv: []string{"sh"}, Path: "/bin/sh", Cwd: "/tmp", Watch: watch(task.MaxWakesPerHour, full...)}); err != nil {
		t.Errorf("16 patterns of 1 KiB and 600 wakes an hour: %v", err)
	}
	// Matches a watcher could not have seen are refused too.
	ref := te.watcher(watch(6, "x"))
	for _, m := range []events.TaskMatches{
		{Count: 1},
		{Count: 1, Lines: []events.TaskLine{{Line: 1, Pattern: 1, Text: "x"}}},
		{Count: 2, Lines: []events.TaskLine{{Line: 2, Text: "x"}, {Line: 1, Text: "x"}}},
		{Count: 1, Lines: []events.TaskLine{{Line: 1, Text: strings.Repeat("x", task.DefaultLineMax+1)}}},
	} {
		if _, err := te.exec(task.MatchTask{Config: cfg, TaskID: ref.TaskID, Matches: m}); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("matches %+v: %v", m, err)
		}
	}
	plain := te.submit()
	if _, err := te.exec(task.MatchTask{Config: cfg, TaskID: plain.TaskID, Matches: lines(1, 0, "x")}); errs.CodeOf(err) != errs.EINVAL {
		t.Errorf("a match of a plain task: %v", err)
	}
}

// Add keeps the count, the first line and the last three, whatever is
// added to what.
func TestTaskMatchesAdd(t *testing.T) {
	var m events.TaskMatches
	for i := int64(1); i <= 10; i++ {
		m = m.Add(events.TaskMatches{Count: 1, Lines: []events.TaskLine{{Line: i}}})
	}
	got := []int64{}
	for _, l := range m.Lines {
		got = append(got, l.Line)
	}
	if m.Count != 10 || fmt.Sprint(got) != "[1 8 9 10]" {
		t.Fatalf("%d %v", m.Count, got)
	}
	if z := (events.TaskMatches{}).Add(events.TaskMatches{Count: 3}); z.Count != 3 || len(z.Lines) != 0 {
		t.Fatalf("a count without lines: %+v", z)
	}
}
