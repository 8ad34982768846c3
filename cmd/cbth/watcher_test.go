package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Watchers through the real binary (spec/tasks.md, "Watchers"): the
// daemon runs a long-lived command, and the lines of its output that
// match wake the thread through the delivery core's batches, bounded per
// hour on the engine clock, durable across a kill -9.

type watcherView struct {
	TaskID string `json:"task_id"`
	JobID  string `json:"job_id"`
	State  string `json:"state"`
	Watch  *struct {
		WakeOn       []string   `json:"wake_on"`
		WakesPerHour int        `json:"wakes_per_hour"`
		Wakes        int        `json:"wakes"`
		Matched      int64      `json:"matched"`
		Folded       int64      `json:"folded"`
		NextWakeAt   *time.Time `json:"next_wake_at"`
	} `json:"watch"`
	Job struct {
		Status        string `json:"status"`
		ResultSummary string `json:"result_summary"`
	} `json:"job"`
}

func (h *homeDir) watcher(id string) watcherView {
	h.t.Helper()
	var v watcherView
	h.ok(&v, "task", "inspect", id)
	if v.Watch == nil {
		h.t.Fatalf("task %s is not a watcher", id)
	}
	return v
}

// turn is one delivery the debug target took: its jobs and the summary
// the thread reads, a line per job.
type turn struct {
	JobIDs  []string `json:"job_ids"`
	Summary string   `json:"summary"`
}

func (h *homeDir) turns(thread string) []turn {
	h.t.Helper()
	f, err := os.Open(filepath.Join(h.root, "debug", "threads", url.PathEscape(thread)+".jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	var out []turn
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var d turn
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			h.t.Fatalf("bad debug line %q", sc.Text())
		}
		out = append(out, d)
	}
	return out
}

// Each matching line becomes an update for the thread, through the
// batches: inside one merge window the READY and ERROR updates and the
// end go in one turn, in order, each once; every update names the
// watcher and its pattern. The end of a watcher that exited 1 reaches
// the thread (a plain task's failure does not); a watcher without
// patterns wakes only at its end.
func TestWatcher_MatchesWakeThroughTheBatchesInOrder(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, "") // the manual clock stands still: a 10 s merge window stays open
	h.behave("T", "deliver")
	v := h.taskRunArgs("--target", "debug", "--thread-id", "T", "--wake-on", "READY", "--wake-on", "ERROR", "--",
		"sh", "-c", "echo noise; echo READY on 8080; sleep 0.3; echo noise; echo 'ERROR disk full'; sleep 0.3; echo bye; exit 1")
	h.taskEnd(v.TaskID)
	if w := h.watcher(v.TaskID); w.Watch.Wakes != 2 || w.Watch.Matched != 2 || w.Job.Status != "ready" {
		t.Fatalf("the watcher: %+v", w)
	}
	if got := h.turns("T"); len(got) != 0 {
		t.Fatalf("delivered inside the merge window: %+v", got)
	}
	h.advance("11s")
	got := h.turns("T")
	if len(got) != 1 || len(got[0].JobIDs) != 3 || got[0].JobIDs[2] != v.JobID {
		t.Fatalf("turns %+v, want one with the two updates and the end", got)
	}
	lines := strings.Split(got[0].Summary, "\n")
	for i, want := range [][]string{
		{"watch: watcher " + v.TaskID + " (`sh -c", "matched /READY/ on line 2: READY on 8080"},
		{"watch: watcher " + v.TaskID, "matched /ERROR/ on line 4: ERROR disk full"},
		{"task: watcher " + v.TaskID, "exited with status 1", "woke this thread 2 times (2 matching lines in all)", "last output: noise | READY on 8080 | noise | ERROR disk full | bye"},
	} {
		for _, w := range want {
			if len(lines) != 3 || !strings.Contains(lines[i], w) {
				t.Fatalf("line %d of the turn's summary lacks %q:\n%s", i+1, w, got[0].Summary)
			}
		}
	}

	// Without a pattern only the end wakes, whatever its status; a plain
	// task's failure reaches no one.
	w := h.taskRunArgs("--target", "debug", "--thread-id", "N", "--watch", "--", "sh", "-c", "echo READY; exit 3")
	p := h.taskRunArgs("--target", "debug", "--thread-id", "N", "--", "sh", "-c", "echo READY; exit 3")
	h.taskEnd(w.TaskID)
	h.taskEnd(p.TaskID)
	h.advance("11s")
	got = h.turns("N")
	if len(got) != 1 || !slices.Equal(got[0].JobIDs, []string{w.JobID}) || !strings.Contains(got[0].Summary, "exited with status 3") ||
		!strings.Contains(got[0].Summary, "woke this thread 0 times") {
		t.Fatalf("thread N got %+v; want the pattern-less watcher's end only", got)
	}
	if n := len(h.events("task.woke")); n != 2 {
		t.Fatalf("%d wakes in the log, want 2", n)
	}

	// A match still on its way to the log when the command exits (C: the
	// bound folds B, and the next fold waits its second) is recorded
	// before the end, and the end carries it.
	f := h.taskRunArgs("--target", "debug", "--thread-id", "P", "--wake-on", "^[ABC]$", "--wakes-per-hour", "1", "--",
		"sh", "-c", "echo A; sleep 0.3; echo B; sleep 0.2; echo C; exit 1")
	h.taskEnd(f.TaskID)
	if s := h.watcher(f.TaskID).Job.ResultSummary; !strings.Contains(s, "woke this thread 1 time (3 matching lines in all); 2 matching lines since its last wake folded in: line 2 /^[ABC]$/: B | line 3 /^[ABC]$/: C") {
		t.Fatalf("the end does not carry every folded line: %s", s)
	}
}

// A flood of 10,000 matching lines wakes the thread at most the bound's
// times (1 here); the rest is counted, recorded a few times (not once a
// line), and goes as one update with the count folded in once the hour
// has passed on the engine clock, not a minute sooner. cbth watch and
// task list show the wakes.
func TestWatcher_FloodIsBoundedOnTheEngineClock(t *testing.T) {
	t.Parallel()
	h := deliveryHome(t, `max_wait_window = "0s"`)
	h.behave("F", "deliver")
	v := h.taskRunArgs("--target", "debug", "--thread-id", "F", "--wake-on", "^READY$", "--wake-on", "^ERROR", "--wakes-per-hour", "1", "--",
		"sh", "-c", `echo READY; sleep 0.5; i=1; while [ $i -le 10000 ]; do echo "ERROR $i"; i=$((i+1)); done; exec sleep 600`)
	var w watcherView
	waitFor(t, "the flood to be recorded", 60*time.Second, func() bool {
		w = h.watcher(v.TaskID)
		return w.Watch.Matched == 10001
	})
	if w.Watch.Wakes != 1 || w.Watch.Folded != 10000 || w.Watch.NextWakeAt == nil {
		t.Fatalf("after the flood: %+v", *w.Watch)
	}
	var first []turn
	waitFor(t, "the READY wake's delivery", 30*time.Second, func() bool { first = h.turns("F"); return len(first) >= 1 })
	if len(first) != 1 || !strings.Contains(first[0].Summary, "matched /^READY$/ on line 1: READY") {
		t.Fatalf("turns after the flood: %+v", first)
	}
	records := len(h.events("task.matched"))
	t.Logf("10000 folded lines in %d task.matched events", records)
	if records > 30 {
		t.Fatalf("%d task.matched events for a flood: folded lines are recorded at most once a second", records)
	}

	h.advance("59m")
	if w := h.watcher(v.TaskID); w.Watch.Wakes != 1 || len(h.turns("F")) != 1 {
		t.Fatalf("59 minutes later the bound let it wake: %+v", *w.Watch)
	}
	h.advance("1m")
	got := h.turns("F")
	if len(got) != 2 {
		t.Fatalf("an hour later: %d turns, want the folded update", len(got))
	}
	for _, want := range []string{"watcher " + v.TaskID, "10000 matching lines, 9999 lines folded into this update",
		"the first line 2 /^ERROR/: ERROR 1;", "line 10001 /^ERROR/: ERROR 10000", "from_line 2"} {
		if !strings.Contains(got[1].Summary, want) {
			t.Fatalf("the folded update lacks %q: %s", want, got[1].Summary)
		}
	}
	woke := h.events("task.woke")
	if len(woke) != 2 || woke[1].Payload["cause"] != "slot" || woke[1].Payload["count"].(float64) != 10000 {
		t.Fatalf("the wakes: %v", woke)
	}

	var view struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
			Watch  bool   `json:"watch"`
			Wakes  int    `json:"wakes"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(watchOnce(t, h)), &view); err != nil || len(view.Tasks) != 1 || !view.Tasks[0].Watch || view.Tasks[0].Wakes != 2 {
		t.Fatalf("cbth watch: %+v %v", view, err)
	}
	var list []struct {
		Wakes int `json:"wakes"`
	}
	h.ok(&list, "task", "list")
	if len(list) != 1 || list[0].Wakes != 2 {
		t.Fatalf("task list: %+v", list)
	}
	if out := h.run("task", "list").stdout; !strings.Contains(out, "WAKES") {
		t.Fatalf("task list for people has no WAKES column:\n%s", out)
	}

	// Stopped, it ends with one final update.
	h.ok(nil, "task", "cancel", v.TaskID)
	waitFor(t, "the final update's delivery", 30*time.Second, func() bool { got = h.turns("F"); return len(got) >= 3 })
	if len(got) != 3 || !slices.Equal(got[2].JobIDs, []string{v.JobID}) || !strings.Contains(got[2].Summary, "cancelled") ||
		!strings.Contains(got[2].Summary, "woke this thread 2 times (10001 matching lines in all)") {
		t.Fatalf("after task cancel: %+v", got[len(got)-1])
	}
}

// A kill -9 of the daemon between a match and its delivery loses
// nothing: the updates are in the log with their jobs ready; the next
// daemon delivers them, each once, and reports the watcher, which died
// with its daemon, as interrupted with what it had seen.
func TestWatcher_KilledDaemonLosesNothing(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "")
	h.behave("K", "busy") // the thread's gate holds: the updates wait in its FIFO
	v := h.taskRunArgs("--target", "debug", "--thread-id", "K", "--wake-on", "READY|ERROR", "--",
		"sh", "-c", "echo READY; sleep 0.5; echo 'ERROR disk full'; exec sleep 600")
	waitFor(t, "both matches to be recorded", 30*time.Second, func() bool { return len(h.events("task.woke")) == 2 })
	if got := h.turns("K"); len(got) != 0 {
		t.Fatalf("delivered through a busy gate: %+v", got)
	}
	var updates []string
	for _, e := range h.events("task.woke") {
		updates = append(updates, e.Payload["job_id"].(string))
	}
	killed := h.pid()
	if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed daemon to go", 10*time.Second, func() bool { return syscall.Kill(killed, 0) != nil })

	h.behave("K", "deliver") // a new daemon: it reconciles, then the gate lets go
	want := append(slices.Clone(updates), v.JobID)
	var got []string
	var summaries []string
	waitFor(t, "the updates and the end to be delivered", 30*time.Second, func() bool {
		got, summaries = nil, nil
		for _, d := range h.turns("K") {
			got = append(got, d.JobIDs...)
			summaries = append(summaries, d.Summary)
		}
		return len(got) >= len(want)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("delivered jobs %v, want the two updates then the end, each once: %v", got, want)
	}
	all := strings.Join(summaries, "\n")
	for _, s := range []string{"matched /READY|ERROR/ on line 1: READY", "matched /READY|ERROR/ on line 2: ERROR disk full",
		"interrupted: the daemon that ran this task (pid " + fmt.Sprint(killed) + ")", "woke this thread 2 times (2 matching lines in all)"} {
		if !strings.Contains(all, s) {
			t.Fatalf("the delivered turns lack %q:\n%s", s, all)
		}
	}
	if tk := h.task(v.TaskID); tk.State != "lost" || !tk.GroupKilled {
		t.Fatalf("the watcher after the restart: %+v", tk)
	}
}

// Bad input is refused with its stable code, and nothing runs or is
// recorded: through the CLI and through MCP's watch_start.
func TestWatcher_BadInputRunsNothing(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "")
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	var many, patterns []string
	for i := range 17 {
		many = append(many, "--wake-on", fmt.Sprint("p", i))
		patterns = append(patterns, fmt.Sprint("p", i))
	}
	h.status()
	head := h.status().LogHeadSeq
	for _, c := range []struct {
		name string
		args []string
		code string
	}{
		{"a pattern that does not compile", []string{"--wake-on", "(unclosed"}, "EINVAL"},
		{"a pattern over 1 KiB", []string{"--wake-on", strings.Repeat("a", 1025)}, "EMSGSIZE"},
		{"more than 16 patterns", many, "EINVAL"},
		{"a wake bound of 0", []string{"--wake-on", "x", "--wakes-per-hour", "0"}, "EINVAL"},
		{"a wake bound over 600", []string{"--wake-on", "x", "--wakes-per-hour", "601"}, "EINVAL"},
	} {
		args := append(append([]string{"task", "run", "--target", "debug", "--thread-id", "B"}, c.args...), "--", "touch", marker)
		r := h.run(args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.code) {
			t.Errorf("%s: exit %d %s, want exit 2 %s", c.name, r.code, r.stderr, c.code)
		}
	}
	if h.status().LogHeadSeq != head {
		t.Fatal("refused watchers appended to the log")
	}

	// Through MCP: no rule allows the command; bad patterns; a rule's bad
	// wake bound.
	h.config("[mcp]\ntask_allow = [[\"sh\", \"-c\", \"...\"]]\n")
	s := h.mcpSession(dir)
	meta := codexMeta("thread-bad")
	before := len(h.exported())
	if a := callTool(t, s, meta, "watch_start", map[string]any{"argv": []string{"touch", marker}, "wake_on": []string{"x"}}); a.code() != "task_not_allowed" ||
		!strings.Contains(a.Text, "watch_start refused, nothing ran") {
		t.Fatalf("watch_start without a rule: %s", a.Text)
	}
	if rec := h.events("mcp.tool_called"); len(rec) != 1 || rec[0].Payload["tool"] != "watch_start" || rec[0].Payload["outcome"] != "refused" {
		t.Fatalf("the refusal's record: %v", rec)
	}
	before++
	for _, c := range []struct {
		wake any
		code string
	}{
		{[]string{"(unclosed"}, "EINVAL"},
		{[]string{strings.Repeat("a", 1025)}, "EMSGSIZE"},
		{patterns, "EINVAL"},
	} {
		if a := callTool(t, s, meta, "watch_start", map[string]any{"argv": []string{"sh", "-c", "touch " + marker}, "wake_on": c.wake}); a.code() != c.code {
			t.Errorf("watch_start with wake_on %.40v: %s, want %s", c.wake, a.Text, c.code)
		}
	}
	if n := len(h.exported()); n != before {
		t.Fatalf("malformed watch_starts appended %d events", n-before)
	}
	h.config("[mcp.tasks.dev]\nargv = [\"sh\", \"-c\", \"touch " + marker + "\"]\nwakes_per_hour = 0\n")
	if a := callTool(t, s, meta, "watch_start", map[string]any{"task": "dev", "wake_on": []string{"x"}}); a.code() != "ENOTCONF" && a.code() != "EINVAL" {
		t.Fatalf("a rule with wakes_per_hour 0: %s", a.Text)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a refused watcher ran")
	}
	var tasks []any
	h.ok(&tasks, "task", "list")
	if len(tasks) != 0 {
		t.Fatalf("refused watchers made tasks: %v", tasks)
	}
}

// The MCP tools act for the calling thread: watch_start under a named
// task's rule takes its wake bound; task_output reads the output from a
// line and appends nothing, and refuses another thread's task; watch_stop
// of another thread's task is refused and recorded, the caller's own
// ends with the final update.
func TestWatcher_MCPToolsForTheCallingThread(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "")
	h.config("[delivery]\nmax_wait_window = \"0s\"\nmin_send_interval = \"0s\"\n[mcp.tasks.dev]\nargv = [\"sh\", \"-c\", \"echo booting; echo ready on 8080; echo serving; exec sleep 600\"]\nwakes_per_hour = 2\nsummary = \"the dev server\"\n")
	s := h.mcpSession(t.TempDir())
	me, other := codexMeta("thread-me"), codexMeta("thread-other")
	a := callTool(t, s, me, "watch_start", map[string]any{"task": "dev", "wake_on": []string{"ready"}})
	if a.IsError || a.Data["task"] != "dev" || !strings.Contains(a.Text, "at most 2 wakes an hour") || !strings.Contains(a.Text, "end your turn") {
		t.Fatalf("watch_start: %s %v", a.Text, a.Data)
	}
	id := a.Data["task_id"].(string)
	if w := a.Data["watch"].(map[string]any); w["wakes_per_hour"].(float64) != 2 {
		t.Fatalf("the rule's wake bound: %v", w)
	}
	waitFor(t, "the ready line's wake", 30*time.Second, func() bool { return h.watcher(id).Watch.Wakes == 1 })

	before := len(h.exported())
	out := callTool(t, s, me, "task_output", map[string]any{"task_id": id, "from_line": 2})
	if out.IsError || out.Data["data"] != "ready on 8080\nserving\n" || out.Data["line"].(float64) != 2 || out.Data["next_line"].(float64) != 4 {
		t.Fatalf("task_output from line 2: %s %v", out.Text, out.Data)
	}
	if strings.Contains(out.Text, "ready on 8080") {
		t.Fatalf("the message repeats the text the model gets in data: %s", out.Text)
	}
	if tail := callTool(t, s, me, "task_output", map[string]any{"task_id": id, "max_bytes": 8}); tail.Data["data"] != "serving\n" {
		t.Fatalf("task_output's last bytes: %v", tail.Data)
	}
	if a := callTool(t, s, other, "task_output", map[string]any{"task_id": id}); a.code() != "thread_mismatch" {
		t.Fatalf("another thread's task_output: %s", a.Text)
	}
	if a := callTool(t, s, me, "task_output", map[string]any{"task_id": id, "from_line": 1, "offset": 3}); a.code() != "EINVAL" {
		t.Fatalf("from_line with offset: %s", a.Text)
	}
	if n := len(h.exported()); n != before {
		t.Fatalf("task_output appended %d events", n-before)
	}

	if a := callTool(t, s, other, "watch_stop", map[string]any{"task_id": id}); a.code() != "thread_mismatch" {
		t.Fatalf("another thread's watch_stop: %s", a.Text)
	}
	if h.watcher(id).State != "running" {
		t.Fatal("another thread's watch_stop stopped the watcher")
	}
	stop := callTool(t, s, me, "watch_stop", map[string]any{"task_id": id})
	if stop.IsError || stop.Data["outcome"] != "cancelled" {
		t.Fatalf("watch_stop: %s", stop.Text)
	}
	w := h.watcher(id)
	if w.Job.Status != "ready" || !strings.Contains(w.Job.ResultSummary, "cancelled") || !strings.Contains(w.Job.ResultSummary, "woke this thread 1 time") {
		t.Fatalf("the stopped watcher's final update: %+v", w.Job)
	}
	var tools []string
	for _, e := range h.events("mcp.tool_called") {
		tools = append(tools, fmt.Sprint(e.Payload["tool"], ":", e.Payload["outcome"]))
	}
	if !slices.Equal(tools, []string{"watch_start:accepted", "watch_stop:refused", "watch_stop:accepted"}) {
		t.Fatalf("the calls recorded: %v", tools)
	}
}
