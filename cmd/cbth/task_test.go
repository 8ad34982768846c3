package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cbth task run through the real binary: the daemon runs the command,
// and its end settles the job.

type taskView struct {
	TaskID         string   `json:"task_id"`
	JobID          string   `json:"job_id"`
	State          string   `json:"state"`
	Argv           []string `json:"argv"`
	PID            int      `json:"pid"`
	PIDStart       string   `json:"pid_start"`
	Outcome        string   `json:"outcome"`
	ExitCode       *int     `json:"exit_code"`
	Signal         string   `json:"signal"`
	Killed         bool     `json:"killed"`
	StopReason     string   `json:"stop_reason"`
	LostReason     string   `json:"lost_reason"`
	GroupKilled    bool     `json:"group_killed"`
	OutputBytes    int64    `json:"output_bytes"`
	SpoolBytes     int64    `json:"spool_bytes"`
	SpoolTruncated bool     `json:"spool_truncated"`
	OutputTail     string   `json:"output_tail"`
	TailTruncated  bool     `json:"output_tail_truncated"`
	SpoolPath      string   `json:"spool_path"`
	Artifact       *struct {
		ID        string `json:"artifact_id"`
		SizeBytes int64  `json:"size_bytes"`
		Path      string `json:"managed_path"`
	} `json:"artifact"`
	Job struct {
		Status        string `json:"status"`
		ResultSummary string `json:"result_summary"`
		FailReason    string `json:"fail_reason"`
		CancelReason  string `json:"cancel_reason"`
		TaskID        string `json:"task_id"`
		Batch         *struct {
			State       string `json:"state"`
			CloseReason string `json:"close_reason"`
		} `json:"batch"`
	} `json:"job"`
}

// taskHome is a home on the system clock (tasks are real processes)
// whose debug target delivers at once, with extra [task] settings (none:
// a config every cbth version reads).
func taskHome(t *testing.T, task string) *homeDir {
	h := newHome(t)
	os.MkdirAll(h.root, 0o700)
	cfg := "[delivery]\nmax_wait_window = \"0s\"\nmin_send_interval = \"0s\"\n"
	if task != "" {
		cfg += "\n[task]\n" + task + "\n"
	}
	if err := os.WriteFile(filepath.Join(h.root, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *homeDir) taskRun(thread string, argv ...string) taskView {
	h.t.Helper()
	return h.taskRunArgs(append([]string{"--target", "debug", "--thread-id", thread, "--"}, argv...)...)
}

// taskRunArgs runs task run with --json before the command: every word
// after -- is the command's.
func (h *homeDir) taskRunArgs(args ...string) taskView {
	h.t.Helper()
	r := h.run(append([]string{"--json", "task", "run"}, args...)...)
	var v taskView
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil || v.TaskID == "" || v.JobID == "" {
		h.t.Fatalf("task run %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	return v
}

func (h *homeDir) task(id string) taskView {
	h.t.Helper()
	var v taskView
	h.ok(&v, "task", "inspect", id)
	return v
}

func live(state string) bool { return state == "queued" || state == "running" || state == "stopping" }

// taskEnd waits until the task's end is recorded.
func (h *homeDir) taskEnd(id string) taskView {
	h.t.Helper()
	var v taskView
	waitFor(h.t, "task "+id+" to end", 60*time.Second, func() bool { v = h.task(id); return !live(v.State) })
	return v
}

func (h *homeDir) taskState(id, state string) taskView {
	h.t.Helper()
	var v taskView
	waitFor(h.t, "task "+id+" to be "+state, 30*time.Second, func() bool { v = h.task(id); return v.State == state })
	return v
}

// waitOutput waits until the task's spool holds s.
func (h *homeDir) waitOutput(id, s string) {
	h.t.Helper()
	waitFor(h.t, "task output "+s, 30*time.Second, func() bool {
		return strings.Contains(h.run("task", "logs", id).stdout, s)
	})
}

// A failing command fails its job with the exit status and its output.
func TestTaskExitFailsTheJob(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "")
	v := h.taskEnd(h.taskRun("T", "sh", "-c", "echo hi; exit 3").TaskID)
	if v.State != "exited" || v.Outcome != "failed" || v.ExitCode == nil || *v.ExitCode != 3 {
		t.Fatalf("task = %+v, want exited with status 3", v)
	}
	if v.Job.Status != "failed" || !strings.Contains(v.Job.FailReason, "status 3") || !strings.Contains(v.Job.FailReason, "hi") {
		t.Errorf("job = %+v, want failed naming status 3 and the output", v.Job)
	}
	if v.OutputTail != "hi\n" || v.OutputBytes != 3 || v.Artifact == nil || v.Artifact.SizeBytes != 3 {
		t.Errorf("output = %q (%d bytes), artifact %+v", v.OutputTail, v.OutputBytes, v.Artifact)
	}
	if r := h.run("task", "logs", v.TaskID); r.code != 0 || r.stdout != "hi\n" {
		t.Errorf("task logs: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	var j struct {
		TaskID string `json:"task_id"`
	}
	h.ok(&j, "job", "query", v.JobID)
	if j.TaskID != v.TaskID {
		t.Errorf("job query names task %q, want %s", j.TaskID, v.TaskID)
	}
}

// A task that exits 0 completes its job with its output as the result,
// and the result is delivered into the job's thread.
func TestTaskDeliveredToItsThread(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "")
	run := h.taskRun("D", "sh", "-c", "echo building; echo delivered")
	v := h.taskEnd(run.TaskID)
	if v.Outcome != "succeeded" || v.Job.Status != "ready" || !strings.Contains(v.Job.ResultSummary, "exited 0") {
		t.Fatalf("task = %+v", v)
	}
	waitFor(t, "the batch to be delivered", 30*time.Second, func() bool {
		v = h.task(run.TaskID)
		return v.Job.Batch != nil && v.Job.Batch.CloseReason == "delivered"
	})
	b, err := os.ReadFile(filepath.Join(h.root, "debug", "threads", "D.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		JobIDs      []string `json:"job_ids"`
		Summary     string   `json:"summary"`
		ArtifactIDs []string `json:"artifact_ids"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("thread file: %v\n%s", err, b)
	}
	if len(rec.JobIDs) != 1 || rec.JobIDs[0] != run.JobID || !strings.Contains(rec.Summary, "delivered") ||
		len(rec.ArtifactIDs) != 1 || rec.ArtifactIDs[0] != v.Artifact.ID {
		t.Errorf("delivered %+v, want job %s with its output artifact", rec, run.JobID)
	}
	if p, _ := os.ReadFile(v.Artifact.Path); string(p) != "building\ndelivered\n" {
		t.Errorf("artifact holds %q", p)
	}
}

// Output past the spool cap is counted; the spool rotates, keeping the
// latest output (at least half of spool_max, at most spool_max), which
// becomes the artifact; the task keeps its last output_tail bytes.
// task logs says what was not kept, then prints what was, ending where
// the output ended.
func TestTaskSpoolCapAndTail(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "spool_max = 1048576\noutput_tail = 4096")
	const total = 100 << 20
	v := h.taskEnd(h.taskRun("T", "sh", "-c", "echo START; head -c 104857600 /dev/zero | tr '\\0' x; echo; echo END").TaskID)
	if v.Outcome != "succeeded" {
		t.Fatalf("task = %+v", v)
	}
	if v.OutputBytes != total+11 || v.SpoolBytes < 1<<19 || v.SpoolBytes > 1<<20 || !v.SpoolTruncated {
		t.Errorf("output %d bytes, spooled %d (truncated %v); want %d and between 512 KiB and 1 MiB", v.OutputBytes, v.SpoolBytes, v.SpoolTruncated, total+11)
	}
	if len(v.OutputTail) != 4096 || !strings.HasSuffix(v.OutputTail, "x\nEND\n") || !v.TailTruncated {
		t.Errorf("tail is %d bytes ending %q", len(v.OutputTail), v.OutputTail[max(0, len(v.OutputTail)-10):])
	}
	if v.Artifact == nil || v.Artifact.SizeBytes != v.SpoolBytes {
		t.Errorf("artifact %+v, want the %d byte spool", v.Artifact, v.SpoolBytes)
	}
	r := h.run("task", "logs", v.TaskID)
	if int64(len(r.stdout)) != v.SpoolBytes || !strings.HasSuffix(r.stdout, "x\nEND\n") || strings.Contains(r.stdout, "START") || !strings.Contains(r.stderr, "were not kept") {
		t.Errorf("task logs printed %d bytes, stderr %q", len(r.stdout), r.stderr)
	}
}

// --timeout stops the command with TERM and fails the job.
func TestTaskTimeout(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	run := h.taskRunArgs("--target", "cli", "--thread-id", "T", "--timeout", "1s", "--", "sleep", "60")
	v := h.taskEnd(run.TaskID)
	if v.Outcome != "timed_out" || v.StopReason != "timeout" || v.Signal != "TERM" || v.Killed {
		t.Fatalf("task = %+v, want timed out by TERM", v)
	}
	if v.Job.Status != "failed" || !strings.Contains(v.Job.FailReason, "timed out") || !strings.Contains(v.Job.FailReason, "TERM") {
		t.Errorf("job = %+v", v.Job)
	}
}

// task cancel stops the command and cancels the job; cancelling again
// changes nothing.
func TestTaskCancel(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	run := h.taskRun("T", "sleep", "60")
	h.taskState(run.TaskID, "running")
	var rep struct {
		Outcome string   `json:"outcome"`
		Task    taskView `json:"task"`
	}
	h.ok(&rep, "task", "cancel", run.TaskID)
	if rep.Outcome != "cancelled" || rep.Task.Outcome != "cancelled" || rep.Task.Signal != "TERM" || rep.Task.Job.Status != "cancelled" {
		t.Fatalf("cancel = %s, task %+v", rep.Outcome, rep.Task)
	}
	h.ok(&rep, "task", "cancel", run.TaskID)
	if rep.Outcome != "already_exited" {
		t.Errorf("second cancel = %s", rep.Outcome)
	}
	// job cancel stops a task too.
	run = h.taskRun("T", "sleep", "60")
	h.taskState(run.TaskID, "running")
	h.ok(nil, "job", "cancel", "--job-id", run.JobID)
	if v := h.taskEnd(run.TaskID); v.Outcome != "cancelled" || v.StopReason != "job_cancelled" {
		t.Errorf("after job cancel the task is %+v", v)
	}
}

// At most max_running tasks run; the others wait queued, in order.
func TestTaskConcurrencyCap(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "max_running = 1")
	first := h.taskRun("T", "sleep", "60")
	second := h.taskRun("T", "sh", "-c", "echo second")
	h.taskState(first.TaskID, "running")
	if v := h.task(second.TaskID); v.State != "queued" {
		t.Fatalf("second task is %s while the first runs", v.State)
	}
	var st struct {
		Running int `json:"running_tasks"`
		Queued  int `json:"queued_tasks"`
	}
	h.ok(&st, "daemon", "status")
	if st.Running != 1 || st.Queued != 1 {
		t.Errorf("status: %d running, %d queued", st.Running, st.Queued)
	}
	h.ok(nil, "task", "cancel", first.TaskID)
	if v := h.taskEnd(second.TaskID); v.Outcome != "succeeded" {
		t.Errorf("second task = %+v", v)
	}
	var list []struct {
		TaskID string `json:"task_id"`
		State  string `json:"state"`
	}
	h.ok(&list, "task", "list")
	if len(list) != 2 || list[0].TaskID != first.TaskID || list[1].TaskID != second.TaskID {
		t.Errorf("task list = %+v", list)
	}
}

// kill -9 of the daemon during a task: the next daemon fails the task
// closed with the reason and the output its spool kept, stops the
// processes left of it, and never runs it (or the one queued behind it)
// again.
func TestTaskFailsClosedAfterDaemonKill(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "max_running = 1")
	marker := filepath.Join(t.TempDir(), "ran")
	run := h.taskRun("T", "sh", "-c", "echo partial; exec sleep 60")
	queued := h.taskRun("T", "touch", marker)
	h.waitOutput(run.TaskID, "partial")
	pid := h.taskState(run.TaskID, "running").PID
	if err := syscall.Kill(h.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the daemon to die", 10*time.Second, func() bool { return h.pid() == 0 })
	if syscall.Kill(pid, 0) != nil {
		t.Fatal("the task died with the daemon; this test needs it to outlive it")
	}
	v := h.task(run.TaskID) // starts a new daemon
	if v.State != "lost" || v.Job.Status != "failed" || !strings.Contains(v.Job.FailReason, "ended before the task did") ||
		!strings.Contains(v.Job.FailReason, "partial") {
		t.Fatalf("after restart: task %s, job %+v", v.State, v.Job)
	}
	if v.OutputTail != "partial\n" || v.Artifact == nil || !v.GroupKilled || !strings.Contains(v.LostReason, "never runs a task twice") {
		t.Errorf("lost task = %+v", v)
	}
	waitFor(t, "the task's sleep to be gone", 10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
	q := h.task(queued.TaskID)
	if q.State != "lost" || q.Job.Status != "failed" || !strings.Contains(q.Job.FailReason, "was not run") {
		t.Errorf("queued task after restart: %s, job %+v", q.State, q.Job)
	}
	// Wait on the daemon's own account, not a guess of how long a wrong
	// start would take: it settles (no task runs, nothing keeps it busy)
	// with no start of the queued task in its log, then the command's
	// mark is checked for.
	waitFor(t, "the daemon to settle", 10*time.Second, func() bool { return len(h.busy()) == 0 })
	for _, e := range h.events("task.started") {
		if e.Stream.ID == queued.TaskID {
			t.Errorf("the queued task was started after the restart: %s", e.line)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the queued task ran after the restart: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Join(h.root, "tasks"))
	if len(ents) != 0 {
		t.Errorf("task directories left: %d", len(ents))
	}
}

// daemon stop stops running tasks and records why their jobs failed.
func TestDaemonStopStopsTasks(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	run := h.taskRun("T", "sleep", "60")
	h.taskState(run.TaskID, "running")
	h.ok(nil, "daemon", "stop")
	v := h.task(run.TaskID)
	if v.Outcome != "stopped" || v.StopReason != "daemon_stop" || v.Job.Status != "failed" || !strings.Contains(v.Job.FailReason, "daemon stopped") {
		t.Errorf("task after daemon stop = %+v", v)
	}
}

// task logs -f follows the output until the task ends.
func TestTaskLogsFollow(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	run := h.taskRun("T", "sh", "-c", "echo one; sleep 1; echo two")
	c := h.cmd("task", "logs", "-f", "--json", run.TaskID)
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var data strings.Builder
	var last struct {
		Offset int64  `json:"offset"`
		Data   string `json:"data"`
		State  string `json:"state"`
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if int64(data.Len()) != last.Offset {
			t.Errorf("chunk at offset %d after %d bytes", last.Offset, data.Len())
		}
		data.WriteString(last.Data)
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	if data.String() != "one\ntwo\n" || last.State != "exited" {
		t.Errorf("followed %q, last state %q", data.String(), last.State)
	}
}

// Bad task input is refused before anything is recorded.
func TestTaskRunRefusesBadInput(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--", "no-such-command-cbth"}, 1},
		{[]string{"--cwd", filepath.Join(t.TempDir(), "missing"), "--", "true"}, 1},
		{[]string{"--timeout", "-1s", "--", "true"}, 2},
		{[]string{}, 2},
	} {
		r := h.run(append([]string{"task", "run", "--target", "debug", "--thread-id", "T"}, tc.args...)...)
		if r.code != tc.code {
			t.Errorf("task run %v: exit %d, want %d\n%s", tc.args, r.code, tc.code, r.stderr)
		}
	}
	var list []any
	h.ok(&list, "task", "list")
	if len(list) != 0 {
		t.Errorf("refused runs left tasks: %v", list)
	}
}

// task run shows the command it submitted as task list does, quoted
// where a shell would split it, and the job's default summary is that
// same line: "sh -c echo tests passed" would read as a different command.
func TestTaskRunShowsTheCommandAsTaskListDoes(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "")
	const want = `sh -c "echo tests passed"`
	r := h.run("task", "run", "--target", "debug", "--thread-id", "T", "--", "sh", "-c", "echo tests passed")
	if r.code != 0 || !strings.HasSuffix(r.stdout, ": "+want+"\n") {
		t.Fatalf("task run: exit %d %q, want the line to end with %q\n%s", r.code, r.stdout, want, r.stderr)
	}
	var list []struct {
		TaskID  string `json:"task_id"`
		JobID   string `json:"job_id"`
		Command string `json:"command"`
	}
	h.ok(&list, "task", "list")
	if len(list) != 1 || list[0].Command != want {
		t.Fatalf("task list = %+v, want the command %q", list, want)
	}
	if r := h.run("task", "inspect", list[0].TaskID); r.code != 0 || !regexp.MustCompile(`(?m)^command +`+regexp.QuoteMeta(want)+`$`).MatchString(r.stdout) {
		t.Fatalf("task inspect: exit %d, want a line command %s\n%s", r.code, want, r.stdout)
	}
	var job struct {
		Summary string `json:"task_summary"`
	}
	h.ok(&job, "job", "query", list[0].JobID)
	if job.Summary != want {
		t.Errorf("the job's default summary is %q, want %q", job.Summary, want)
	}
}

// Once a failed task's output artifact is collected (after
// min_artifact_ttl), task logs prints the tail the task's record kept.
func TestTaskLogsAfterTheArtifactIsCollected(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	os.MkdirAll(h.root, 0o700)
	os.WriteFile(filepath.Join(h.root, "config.toml"), []byte("min_artifact_ttl = \"0s\"\n[delivery]\nsweep_interval = \"50ms\"\n"), 0o600)
	run := h.taskRun("T", "sh", "-c", "echo kept in the record; exit 1")
	h.taskEnd(run.TaskID)
	waitFor(t, "the output artifact to be collected", 30*time.Second, func() bool {
		var v struct {
			Artifact *struct {
				State string `json:"state"`
			} `json:"artifact"`
		}
		h.ok(&v, "task", "inspect", run.TaskID)
		return v.Artifact != nil && v.Artifact.State == "collected"
	})
	r := h.run("task", "logs", run.TaskID)
	if r.code != 0 || r.stdout != "kept in the record\n" || !strings.Contains(r.stderr, "artifact is gone") {
		t.Errorf("task logs: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// A task cannot name the group a later daemon kills: it writes a
// stranger's process group into its lock file (descriptor 3), the daemon
// dies, and the next daemon still stops the task's own group, found by
// the leader's pid and start time the log holds, and leaves the stranger
// alone.
func TestTaskReapIgnoresTheGroupTheLockNames(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "")
	victim := exec.Command("sleep", "60")
	victim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	victimDone := make(chan struct{})
	go func() { victim.Wait(); close(victimDone) }()
	t.Cleanup(func() { victim.Process.Kill(); <-victimDone })
	run := h.taskRun("T", "sh", "-c", fmt.Sprintf(`printf '%%d\n' %d >&3; echo forged; exec sleep 60`, victim.Process.Pid))
	h.waitOutput(run.TaskID, "forged")
	v := h.taskState(run.TaskID, "running")
	if v.PIDStart == "" {
		t.Fatalf("task.started recorded no start time of the leader: %+v", v)
	}
	if err := syscall.Kill(h.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the daemon to die", 10*time.Second, func() bool { return h.pid() == 0 })
	v = h.task(run.TaskID) // a new daemon reaps
	if v.State != "lost" || !v.GroupKilled || !strings.Contains(v.LostReason, "were stopped") {
		t.Fatalf("lost task = %+v", v)
	}
	waitFor(t, "the task's own sleep to be gone", 10*time.Second, func() bool { return syscall.Kill(v.PID, 0) != nil })
	select {
	case <-victimDone:
		t.Fatal("the group the task wrote into its lock was killed")
	default:
	}
}

// A group whose recorded leader is gone cannot be told from a stranger's
// that took the same id: it is never signalled, and the task's record
// says so. (The leader is killed by hand after the daemon; its child
// keeps the lock held.)
func TestTaskReapLeavesAnUnverifiedGroup(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "")
	run := h.taskRun("T", "sh", "-c", `sleep 60 & echo child=$!; wait`)
	h.waitOutput(run.TaskID, "child=")
	v := h.taskState(run.TaskID, "running")
	var child int
	if _, err := fmt.Sscanf(h.run("task", "logs", run.TaskID).stdout, "child=%d", &child); err != nil || child <= 1 {
		t.Fatalf("child pid: %v", err)
	}
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	if err := syscall.Kill(h.pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the daemon to die", 10*time.Second, func() bool { return h.pid() == 0 })
	if err := syscall.Kill(v.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the leader to be gone", 10*time.Second, func() bool { return syscall.Kill(v.PID, 0) != nil })
	v = h.task(run.TaskID)
	if v.State != "lost" || v.GroupKilled || !strings.Contains(v.LostReason, "was not signalled") ||
		!strings.Contains(v.LostReason, "has exited") {
		t.Fatalf("lost task = %+v", v)
	}
	if err := syscall.Kill(child, 0); err != nil {
		t.Errorf("the task's child was signalled: %v", err)
	}
}

// A task that prints a secret of its own environment (*_TOKEN, *_KEY,
// *_SECRET, *PASSWORD*) leaves it out of everything the log records: the
// output tail and the job's reason say <redacted NAME> instead.
func TestTaskSecretsAreRedactedFromTheLog(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "")
	const secret = "tok-9f8e7d6c5b4a"
	h.env = append(h.env, "DEPLOY_TOKEN="+secret, "DB_PASSWORD_FILE_X=pw-0123456789", "SHORT_KEY=abc")
	run := h.taskRun("T", "sh", "-c", `echo "using $DB_PASSWORD_FILE_X"; echo "short $SHORT_KEY"; echo "token $DEPLOY_TOKEN"; exit 3`)
	v := h.taskEnd(run.TaskID)
	if v.Job.Status != "failed" || !strings.Contains(v.Job.FailReason, "token <redacted DEPLOY_TOKEN>") ||
		!strings.Contains(v.OutputTail, "using <redacted DB_PASSWORD_FILE_X>") || !strings.Contains(v.OutputTail, "short abc") {
		t.Fatalf("task = %+v", v)
	}
	r := h.run("events", "export")
	if r.code != 0 || strings.Contains(r.stdout, secret) || strings.Contains(r.stdout, "pw-0123456789") {
		t.Fatalf("the log holds a secret (exit %d)", r.code)
	}
}
