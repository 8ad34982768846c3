package main_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/internal/execfile"
)

// Upgrades through real binaries: an old cbth, built in the test from a
// commit of this repository's history, runs the daemon; the cbth under
// test replaces the binary and takes over the home.

// The old sides. Both commits are in main's history.
const (
	// protocol2Base is the last cbth of protocol 2: no tasks, no
	// daemon.handover, EVERSION to every newer client.
	protocol2Base = "f872596f7f21cc2e1319ebf9d421018ec0184f6c"
	// taskBase is the first cbth with the task runner and the handover
	// operation (protocol 3, version 0.1.0): an older version, of the
	// protocol before this one's.
	taskBase = "b97e6806b52ef8becb871cfc4b95b4d96b4da6b5"
)

var oldBuilds sync.Map // ref -> *oldBuild

type oldBuild struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// removeOldBuilds removes the old builds' sources and binaries, once every
// test is done with them (TestMain).
func removeOldBuilds() {
	oldBuilds.Range(func(_, v any) bool {
		if b := v.(*oldBuild); b.dir != "" {
			os.RemoveAll(b.dir)
		}
		return true
	})
}

// buildAt builds cbth as it was at ref, once per test binary run.
func buildAt(t *testing.T, ref string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: the upgrade tests build an old cbth from the repository's history")
	}
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skip("not a git checkout: the upgrade tests build an old cbth from the repository's history")
	}
	if err := exec.Command("git", "-C", root, "cat-file", "-e", ref+"^{commit}").Run(); err != nil {
		t.Fatalf("commit %s is not in this clone's history (a shallow clone? git fetch --unshallow); the upgrade tests build their old cbth from it", ref)
	}
	v, _ := oldBuilds.LoadOrStore(ref, &oldBuild{})
	b := v.(*oldBuild)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "cbth-old-")
		if err != nil {
			b.err = err
			return
		}
		b.dir = dir
		src := filepath.Join(dir, "src")
		if b.err = extract(root, ref, src); b.err != nil {
			return
		}
		b.bin = filepath.Join(dir, "cbth")
		cmd := exec.Command("go", "build", "-buildvcs=false", "-o", b.bin, "./cmd/cbth")
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = errors.New("build " + ref + ": " + err.Error() + "\n" + string(out))
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// extract writes the tree of ref into dir (git archive, read in Go).
func extract(root, ref, dir string) error {
	cmd := exec.Command("git", "-C", root, "archive", "--format=tar", ref)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return err
	}
	tr := tar.NewReader(&out)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			if err = os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
				var f *os.File
				if f, err = os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(hdr.Mode)&0o755|0o600); err == nil {
					_, err = io.Copy(f, tr)
					f.Close()
				}
			}
		case tar.TypeSymlink:
			err = os.Symlink(hdr.Linkname, p)
		}
		if err != nil {
			return err
		}
	}
}

// install puts a binary at path as an upgrade does: a new file renamed
// over the old one, so a running process keeps its own.
func install(t *testing.T, src, path string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := execfile.Put(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// upgradeHome is a home whose commands run bin/cbth, which starts as old.
type upgradeHome struct {
	*homeDir
	bin string
}

func newUpgradeHome(t *testing.T, old string) *upgradeHome {
	h := taskHome(t, "")
	bin := filepath.Join(t.TempDir(), "cbth")
	install(t, old, bin)
	return &upgradeHome{homeDir: h, bin: bin}
}

// newOlderHome is an upgradeHome whose binary starts as a cbth built as
// version 0.1.9, of this protocol.
func newOlderHome(t *testing.T) *upgradeHome {
	older := filepath.Join(t.TempDir(), "cbth")
	build := exec.Command("go", "build", "-ldflags=-X=main.Version=0.1.9", "-o", older, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return newUpgradeHome(t, older)
}

// runningDaemon is which daemon `daemon status` found.
type runningDaemon struct {
	PID     int    `json:"pid"`
	Version string `json:"version"`
}

func (u *upgradeHome) daemonStatus() runningDaemon {
	u.t.Helper()
	var st runningDaemon
	u.okBin(&st, "daemon", "status")
	return st
}

// startBin starts u.bin with args.
func (u *upgradeHome) startBin(stdout, stderr io.Writer, args ...string) *exec.Cmd {
	u.t.Helper()
	c := exec.Command(u.bin, args...)
	c.Env = append(os.Environ(), u.env...)
	c.Stdout, c.Stderr = stdout, stderr
	if err := c.Start(); err != nil {
		u.t.Fatal(err)
	}
	return c
}

func (u *upgradeHome) runBin(args ...string) result {
	var out, errb bytes.Buffer
	err := u.startBin(&out, &errb, args...).Wait()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		u.t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

func (u *upgradeHome) okBin(out any, args ...string) {
	u.t.Helper()
	r := u.runBin(append([]string{"--json"}, args...)...)
	if r.code != 0 {
		u.t.Fatalf("%s %v: exit %d\n%s%s", u.bin, args, r.code, r.stdout, r.stderr)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(r.stdout), out); err != nil {
			u.t.Fatalf("%v: %v\n%s", args, err, r.stdout)
		}
	}
}

type jobRow struct {
	JobID  string `json:"job_id"`
	Status string `json:"status"`
}

type batchRow struct {
	BatchID      string `json:"batch_id"`
	State        string `json:"state"`
	ReplayPolicy string `json:"replay_policy"`
	CloseReason  string `json:"close_reason"`
}

// seed gives the daemon an open job, a parked batch and a delivered one,
// through whichever binary is installed, and returns the open job.
func (u *upgradeHome) seed() string {
	u.t.Helper()
	var sub struct {
		JobID string `json:"job_id"`
	}
	u.okBin(&sub, "job", "submit", "--target", "cli", "--thread-id", "OPEN", "--task-kind", "ci", "--summary", "still running")
	u.okBin(nil, "debug", "target", "--thread-id", "P", "unknown")
	for _, th := range []string{"P", "DL"} {
		var j struct {
			JobID string `json:"job_id"`
		}
		u.okBin(&j, "job", "submit", "--target", "debug", "--thread-id", th, "--task-kind", "ci", "--summary", "for "+th)
		u.okBin(nil, "job", "complete", "--job-id", j.JobID, "--summary", "done "+th)
	}
	waitFor(u.t, "a parked batch and a delivered one", 30*time.Second, func() bool {
		var bs []batchRow
		u.okBin(&bs, "batch", "list")
		parked, delivered := 0, 0
		for _, b := range bs {
			if b.State != "closed" && b.ReplayPolicy == "manual_resolution_only" {
				parked++
			}
			if b.CloseReason == "delivered" {
				delivered++
			}
		}
		return parked == 1 && delivered == 1
	})
	return sub.JobID
}

func (u *upgradeHome) snapshot() ([]jobRow, []batchRow) {
	u.t.Helper()
	var js []jobRow
	var bs []batchRow
	u.okBin(&js, "job", "list")
	u.okBin(&bs, "batch", "list")
	return js, bs
}

// An old daemon of protocol 2 with open jobs, a parked batch, a
// delivered one and a script in the middle of its job: the new binary
// is refused with EVERSION naming the command to run, daemon restart
// replaces the daemon, and every job and batch is there as it was.
func TestUpgradeFromProtocol2(t *testing.T) {
	t.Parallel()
	u := newUpgradeHome(t, buildAt(t, protocol2Base))
	open := u.seed()
	var script struct {
		JobID string `json:"job_id"`
	}
	u.okBin(&script, "job", "submit", "--target", "debug", "--thread-id", "S", "--task-kind", "ci", "--summary", "a script's job")
	gate := filepath.Join(t.TempDir(), "go")
	// The script protocol: a long command that reports its job through
	// whatever cbth is installed when it ends.
	sh := exec.Command("sh", "-c", `while [ ! -f "$1" ]; do sleep 0.05; done; exec "$2" job complete --job-id "$3" --summary "script done"`,
		"sh", gate, u.bin, script.JobID)
	sh.Env = append(os.Environ(), u.env...)
	var shErr bytes.Buffer
	sh.Stderr = &shErr
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	jobs, batches := u.snapshot()
	var old status
	u.okBin(&old, "daemon", "status")

	install(t, cbthBin, u.bin)
	r := u.runBin("--json", "job", "query", open)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	json.Unmarshal([]byte(r.stdout), &e)
	if r.code != 69 || e.Error.Code != "EVERSION" || !strings.Contains(e.Error.Message, "cbth daemon restart") || !strings.Contains(e.Error.Message, "protocol 2") {
		t.Fatalf("new client against the old daemon: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	var rs struct {
		Outcome  string `json:"outcome"`
		PID      int    `json:"pid"`
		Version  string `json:"version"`
		Protocol int    `json:"protocol"`
		Old      struct {
			PID      int    `json:"pid"`
			Protocol int    `json:"protocol"`
			How      string `json:"how"`
		} `json:"old"`
	}
	u.okBin(&rs, "daemon", "restart")
	if rs.Outcome != "restarted" || rs.Old.PID != old.PID || rs.Old.Protocol != 2 || rs.Old.How != "signal" || rs.Protocol != ipc.Proto || rs.PID == old.PID {
		t.Fatalf("restart = %+v (old daemon %d)", rs, old.PID)
	}
	jobs2, batches2 := u.snapshot()
	if !sameJSON(jobs, jobs2) || !sameJSON(batches, batches2) {
		t.Errorf("jobs or batches changed across the upgrade:\n%+v\n%+v\n%+v\n%+v", jobs, jobs2, batches, batches2)
	}
	os.WriteFile(gate, nil, 0o600)
	if err := sh.Wait(); err != nil {
		t.Fatalf("the script's job complete after the upgrade: %v %s", err, shErr.String())
	}
	var j jobRow
	u.okBin(&j, "job", "query", script.JobID)
	if j.Status != "ready" {
		t.Errorf("the script's job is %s", j.Status)
	}
	u.verify()
}

// An older daemon (the first with tasks, of protocol 3) runs a task
// while it holds open jobs and a parked batch: daemon restart waits for
// the task, whose end the old daemon records, and the new daemon has
// every job, batch and task. A task run during the handover is refused.
func TestUpgradeWaitsForARunningTask(t *testing.T) {
	t.Parallel()
	u := newUpgradeHome(t, buildAt(t, taskBase))
	u.seed()
	gate := filepath.Join(t.TempDir(), "go")
	var run taskView
	u.okBin(&run, "task", "run", "--target", "debug", "--thread-id", "TASK", "--",
		"sh", "-c", `echo started; while [ ! -f "$0" ]; do sleep 0.05; done; echo finished`, gate)
	waitFor(t, "the task to run", 30*time.Second, func() bool {
		var v taskView
		u.okBin(&v, "task", "inspect", run.TaskID)
		return strings.Contains(v.OutputTail, "started") || v.State == "running" && strings.Contains(u.runBin("task", "logs", run.TaskID).stdout, "started")
	})
	jobs, batches := u.snapshot()
	var old status
	u.okBin(&old, "daemon", "status")

	install(t, cbthBin, u.bin)
	var out, errb bytes.Buffer
	restart := u.startBin(&out, &errb, "--json", "daemon", "restart")
	waitFor(t, "the old daemon to be handing over", 30*time.Second, func() bool {
		var st struct {
			Handing bool `json:"handing_over"`
		}
		u.okBin(&st, "daemon", "status")
		return st.Handing
	})
	// Refused: EBUSY by a daemon of this protocol handing over, EVERSION
	// (naming daemon restart) while the old one speaks an older protocol
	// (taskBase is protocol 3; listings paged in 4).
	r := u.runBin("--json", "task", "run", "--target", "debug", "--thread-id", "LATE", "--", "true")
	if sameProto := ipc.Proto == 3; (sameProto && (r.code != 1 || !strings.Contains(r.stdout, "EBUSY"))) ||
		(!sameProto && (r.code != 69 || !strings.Contains(r.stdout, "EVERSION"))) {
		t.Errorf("task run during the handover: exit %d %s %s", r.code, r.stdout, r.stderr)
	}
	os.WriteFile(gate, nil, 0o600)
	if err := restart.Wait(); err != nil {
		t.Fatalf("daemon restart: %v\n%s%s", err, out.String(), errb.String())
	}
	var rs struct {
		Outcome string `json:"outcome"`
		PID     int    `json:"pid"`
		Version string `json:"version"`
		Old     struct {
			PID     int    `json:"pid"`
			Version string `json:"version"`
			How     string `json:"how"`
		} `json:"old"`
	}
	json.Unmarshal(out.Bytes(), &rs)
	if rs.Outcome != "restarted" || rs.Old.PID != old.PID || rs.Old.Version != "0.1.0" || rs.Old.How != "handover" || rs.PID == old.PID || rs.Version == "0.1.0" {
		t.Fatalf("restart = %s", out.String())
	}
	v := u.task(run.TaskID)
	if v.State != "exited" || v.Outcome != "succeeded" || v.OutputTail != "started\nfinished\n" || v.Job.Status != "ready" {
		t.Fatalf("the task across the handover: %+v", v)
	}
	jobs2, batches2 := u.snapshot()
	// The task's job became ready and its result joined a batch; the rest
	// is as it was.
	for _, j := range jobs2 {
		if j.JobID == run.JobID {
			continue
		}
		if !containsJSON(jobs, j) {
			t.Errorf("job %+v changed across the upgrade", j)
		}
	}
	for _, b := range batches {
		if !containsJSON(batches2, b) {
			t.Errorf("batch %+v changed across the upgrade", b)
		}
	}
	if len(jobs2) != len(jobs) || len(batches2) != len(batches)+1 {
		t.Errorf("%d jobs and %d batches became %d and %d", len(jobs), len(batches), len(jobs2), len(batches2))
	}
	u.verify()
}

// daemon restart --stop-tasks does not wait: the task is stopped and its
// job fails, saying why; a wait that runs out changes nothing.
func TestRestartStopTasks(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "kill_grace = \"2s\"")
	run := h.taskRun("T", "sleep", "60")
	h.taskState(run.TaskID, "running")
	pid := h.status().PID
	if r := h.run("daemon", "restart", "--wait", "200ms"); r.code != 1 || !strings.Contains(r.stderr, "ETIMEDOUT") {
		t.Fatalf("restart --wait 200ms: exit %d %s", r.code, r.stderr)
	}
	if st := h.status(); st.PID != pid {
		t.Fatalf("a handover that timed out replaced the daemon")
	}
	if v := h.task(run.TaskID); v.State != "running" {
		t.Fatalf("a handover that timed out touched the task: %s", v.State)
	}
	var rs struct {
		Old struct {
			TasksStopped int `json:"tasks_stopped"`
		} `json:"old"`
	}
	h.ok(&rs, "daemon", "restart", "--stop-tasks")
	v := h.task(run.TaskID)
	if rs.Old.TasksStopped != 1 || v.Outcome != "stopped" || v.StopReason != "handover" || !strings.Contains(v.Job.FailReason, "--stop-tasks") {
		t.Errorf("restart --stop-tasks: %+v, task %+v", rs, v)
	}
	if h.status().PID == pid {
		t.Error("the daemon was not replaced")
	}
}

// A client that meets an older idle daemon of its protocol replaces it;
// a busy one is left running with a warning naming the command.
func TestIdleOlderDaemonIsReplaced(t *testing.T) {
	t.Parallel()
	u := newOlderHome(t)
	var run taskView
	u.okBin(&run, "task", "run", "--target", "cli", "--thread-id", "T", "--", "sleep", "60")
	st := u.daemonStatus()
	install(t, cbthBin, u.bin)
	r := u.runBin("job", "list")
	if r.code != 0 || !strings.Contains(r.stderr, "cbth daemon restart") {
		t.Fatalf("a busy older daemon: exit %d, stderr %q", r.code, r.stderr)
	}
	again := u.daemonStatus()
	if again.PID != st.PID {
		t.Fatal("a busy older daemon was replaced")
	}
	// The cancel is served by the older daemon, which is idle once the
	// task's group has exited and been recorded: the first command that
	// finds it idle replaces it (the cancel's own reply may come first).
	r = u.runBin("task", "cancel", run.TaskID)
	if r.code != 0 {
		t.Fatalf("task cancel: exit %d, stderr %q", r.code, r.stderr)
	}
	waitFor(t, "the idle older daemon replaced", 30*time.Second, func() bool {
		if strings.Contains(r.stderr, "replaced the idle daemon (cbth 0.1.9") {
			return true
		}
		r = u.runBin("job", "list")
		return r.code == 0 && strings.Contains(r.stderr, "replaced the idle daemon (cbth 0.1.9")
	})
	again = u.daemonStatus()
	if again.PID == st.PID || again.Version == "0.1.9" {
		t.Errorf("after the replacement the daemon is %+v", again)
	}
}

// The auto-replacement runs the newer binary as the home's daemon: a
// binary its group could have rewritten replaces nothing, and the client
// says why, naming the binary and its mode; made private, it replaces
// the idle older daemon.
func TestUpgrade_SharedBinaryDoesNotReplace(t *testing.T) {
	t.Parallel()
	u := newOlderHome(t)
	st := u.daemonStatus()
	install(t, cbthBin, u.bin)
	if err := os.Chmod(u.bin, 0o775); err != nil {
		t.Fatal(err)
	}
	r := u.runBin("job", "list")
	if r.code != 0 || !strings.Contains(r.stderr, "not replacing the idle daemon (cbth 0.1.9)") || !strings.Contains(r.stderr, u.bin) ||
		!strings.Contains(r.stderr, "mode 0775") {
		t.Fatalf("a shared newer binary: exit %d, stderr %q", r.code, r.stderr)
	}
	again := u.daemonStatus()
	if again.PID != st.PID || again.Version != "0.1.9" {
		t.Fatalf("replaced by a binary its group could rewrite: %+v, was %+v", again, st)
	}
	if err := os.Chmod(u.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if r := u.runBin("job", "list"); r.code != 0 || !strings.Contains(r.stderr, "replaced the idle daemon (cbth 0.1.9") {
		t.Fatalf("a private newer binary: exit %d, stderr %q", r.code, r.stderr)
	}
}

func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func containsJSON[T any](list []T, v T) bool {
	for _, x := range list {
		if sameJSON(x, v) {
			return true
		}
	}
	return false
}
