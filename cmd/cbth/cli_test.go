package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/internal/testkit/proctest"
)

// These tests drive the real binary: built once, run as separate
// processes against a private CBTH_HOME, talking to a real daemon over the
// real socket.

var cbthBin string

func TestMain(m *testing.M) {
	// The end-to-end tests mostly wait: on daemons, on Codex, on the
	// fake model. They run in parallel, each in a private home, more at a
	// time than the machine has cores (go test's default), unless the
	// caller said how many.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(max(4, 2*runtime.GOMAXPROCS(0))))
	}
	dir, err := os.MkdirTemp("", "cbth-bin-")
	if err != nil {
		panic(err)
	}
	cbthBin = filepath.Join(dir, "cbth")
	out, err := exec.Command("go", "build", "-o", cbthBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build cbth: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if providersPath != "" {
		os.RemoveAll(filepath.Dir(providersPath))
	}
	removeOldBuilds()
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

type homeDir struct {
	t    *testing.T
	root string
	env  []string
	// damaged marks a home whose log a test damaged on purpose: its
	// log is not verified at the end.
	damaged bool
}

// newHome makes a private home. When the test ends it stops the home's
// daemon and verifies its log with `cbth events verify` (the hash chain,
// every transition, the projections against a rebuild).
func newHome(t *testing.T, extraEnv ...string) *homeDir {
	t.Helper()
	root := filepath.Join(t.TempDir(), "home")
	h := &homeDir{t: t, root: root, env: append([]string{"CBTH_HOME=" + root, "HOME=" + t.TempDir()}, extraEnv...)}
	t.Cleanup(func() {
		h.run("daemon", "stop")
		if pid := h.pid(); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
			waitFor(t, "the killed daemon to go", 10*time.Second, func() bool { return h.pid() == 0 })
		}
		if _, err := os.Stat(filepath.Join(root, "cbth.db")); err != nil || h.damaged {
			return // no log was ever written, or a test damaged it
		}
		if r := h.run("events", "verify", "--json"); r.code != 0 {
			t.Errorf("the home's log does not verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
	return h
}

// ctxInit makes an object tree whose objects name a runner that is this
// cbth under the runner's name, and returns the runner's path.
func (h *homeDir) ctxInit() string {
	h.t.Helper()
	runner := filepath.Join(h.t.TempDir(), "cortexfs-object-runner")
	if err := os.Symlink(cbthBin, runner); err != nil {
		h.t.Fatal(err)
	}
	h.ok(nil, "ctx", "init", "--runner", runner)
	return runner
}

func (h *homeDir) cmd(args ...string) *exec.Cmd {
	c := exec.Command(cbthBin, args...)
	c.Env = append(os.Environ(), h.env...)
	return c
}

func (h *homeDir) run(args ...string) result {
	c := h.cmd(args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			h.t.Fatalf("run %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{out.String(), errb.String(), code}
}

// ok runs a command that must succeed and decodes its --json output.
func (h *homeDir) ok(out any, args ...string) {
	h.t.Helper()
	r := h.run(append(args, "--json")...)
	if r.code != 0 {
		h.t.Fatalf("cbth %v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(r.stdout), out); err != nil {
			h.t.Fatalf("cbth %v: stdout is not JSON: %v\n%s", args, err, r.stdout)
		}
	}
}

func (h *homeDir) pid() int {
	b, err := os.ReadFile(filepath.Join(h.root, "run", "daemon.lock"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if !(home.Home{Root: h.root}).DaemonRunning() {
		return 0
	}
	return pid
}

type status struct {
	PID        int      `json:"pid"`
	Version    string   `json:"version"`
	LogHeadSeq uint64   `json:"log_head_seq"`
	ActiveJobs int      `json:"active_jobs"`
	Busy       []string `json:"busy_reasons"`
}

func (h *homeDir) status() status {
	var st status
	h.ok(&st, "daemon", "status")
	return st
}

func (h *homeDir) submit(thread string, extra ...string) string {
	h.t.Helper()
	var res struct {
		JobID  string `json:"job_id"`
		Status string `json:"status"`
	}
	h.ok(&res, append([]string{"job", "submit", "--target", "cli", "--thread-id", thread, "--task-kind", "ci", "--summary", "wait for CI"}, extra...)...)
	if res.JobID == "" || res.Status != "running" {
		h.t.Fatalf("submit returned %+v", res)
	}
	return res.JobID
}

func (h *homeDir) verify() {
	h.t.Helper()
	var rep struct {
		Events   uint64 `json:"events"`
		Problems []any  `json:"problems"`
	}
	h.status() // make sure it is up
	if err := callOp(h.root, "events.verify", &rep); err != nil {
		h.t.Fatal(err)
	}
	if len(rep.Problems) != 0 {
		h.t.Fatalf("log does not verify: %+v", rep.Problems)
	}
}

// callOp calls a daemon operation directly over the socket.
func callOp(root, op string, out any) error { return callOpArgs(root, op, nil, out) }

func callOpArgs(root, op string, args, out any) error {
	c, err := ipc.Dial(filepath.Join(root, "run", "cbth.sock"), "test")
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(op, args, out)
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAutoStartAndJobLifecycle(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	if h.pid() != 0 {
		t.Fatal("a daemon runs before any command")
	}
	id := h.submit("thread-1")
	if h.pid() == 0 {
		t.Fatal("submit did not start the daemon")
	}
	result := filepath.Join(t.TempDir(), "result.json")
	os.WriteFile(result, []byte(`{"ci":"green"}`), 0o600)
	var tr struct {
		Status   string `json:"status"`
		Artifact struct {
			ID   string `json:"artifact_id"`
			Size int64  `json:"size_bytes"`
			Path string `json:"managed_path"`
			SHA  string `json:"sha256"`
			Type string `json:"content_type"`
		} `json:"artifact"`
	}
	h.ok(&tr, "job", "complete", "--job-id", id, "--summary", "CI is green", "--result-file", result)
	if tr.Status != "ready" || tr.Artifact.Size != 14 || tr.Artifact.Type != "application/json" {
		t.Fatalf("complete returned %+v", tr)
	}
	// The submitter may delete its file: the artifact is cbth's copy.
	os.Remove(result)
	if b, err := os.ReadFile(tr.Artifact.Path); err != nil || string(b) != `{"ci":"green"}` {
		t.Fatalf("managed payload: %q, %v", b, err)
	}
	var m struct {
		SHA256, SourceJobID string
	}
	mb, _ := os.ReadFile(filepath.Join(filepath.Dir(tr.Artifact.Path), "manifest.json"))
	json.Unmarshal(mb, &m)
	if m.SHA256 != tr.Artifact.SHA {
		t.Fatalf("manifest sha %q != %q", m.SHA256, tr.Artifact.SHA)
	}

	var q map[string]any
	h.ok(&q, "job", "query", id)
	for _, k := range []string{"job_id", "status", "delivery_policy", "artifact", "created_at", "ready_at", "updated_at", "batch"} {
		if _, ok := q[k]; !ok {
			t.Errorf("job query --json lacks %q: %v", k, q)
		}
	}
	pol := q["delivery_policy"].(map[string]any)
	if pol["read_only"] != false || pol["requires_approval"] != true || pol["requires_network"] != true || pol["requires_write_access"] != true {
		t.Errorf("absent policy is not fail-closed: %v", pol)
	}

	other := h.submit("thread-1")
	h.ok(nil, "job", "fail", "--job-id", other, "--reason", "runner crashed")
	third := h.submit("thread-2")
	h.ok(nil, "job", "cancel", "--job-id", third)
	var again struct{ Outcome string }
	h.ok(&again, "job", "cancel", "--job-id", third)
	if again.Outcome != "already_cancelled" {
		t.Fatalf("second cancel: %+v", again)
	}
	var list []map[string]any
	h.ok(&list, "job", "list")
	if len(list) != 3 {
		t.Fatalf("job list has %d jobs, want 3", len(list))
	}
	h.verify()
}

func TestSubmit_PolicyFlagsWinOverMetadata(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	meta := filepath.Join(t.TempDir(), "meta.json")
	os.WriteFile(meta, []byte(`{"delivery_policy":{"read_only":true,"requires_approval":false,"requires_network":false,"requires_write_access":false}}`), 0o600)
	id := h.submit("t", "--metadata-file", meta, "--delivery-requires-network", "true")
	var q struct {
		Policy map[string]bool `json:"delivery_policy"`
	}
	h.ok(&q, "job", "query", id)
	want := map[string]bool{"read_only": true, "requires_approval": false, "requires_network": true, "requires_write_access": false}
	for k, v := range want {
		if q.Policy[k] != v {
			t.Errorf("%s = %v, want %v (policy %v)", k, q.Policy[k], v, q.Policy)
		}
	}
}

func TestSubmit_DedupeKeyReturnsOriginal(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	a := h.submit("t", "--dedupe-key", "pr-42")
	head := h.status().LogHeadSeq
	var res struct {
		JobID        string `json:"job_id"`
		Deduplicated bool   `json:"deduplicated"`
	}
	h.ok(&res, "job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "ci", "--summary", "again", "--dedupe-key", "pr-42")
	if res.JobID != a || !res.Deduplicated {
		t.Fatalf("second submit = %+v, want job %s deduplicated", res, a)
	}
	if h.status().LogHeadSeq != head {
		t.Fatal("a deduplicated submit appended events")
	}
}

// Bad input gets a stable code and leaves the log untouched.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHome(t, "CBTH_IDLE_TIMEOUT=1h")
	cfg := "max_result_bytes = 1024\n[delivery]\nobservation_window = \"2h\"\n"
	os.MkdirAll(h.root, 0o700)
	os.WriteFile(filepath.Join(h.root, "config.toml"), []byte(cfg), 0o600)
	running := h.submit("t")
	done := h.submit("t")
	h.ok(nil, "job", "complete", "--job-id", done, "--summary", "ok")
	cancelled := h.submit("t")
	h.ok(nil, "job", "cancel", "--job-id", cancelled)
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	os.WriteFile(big, bytes.Repeat([]byte("x"), 2048), 0o600)
	badMeta := filepath.Join(dir, "bad.json")
	os.WriteFile(badMeta, []byte(`{"delivery_policy":`), 0o600)
	small := filepath.Join(dir, "small")
	os.WriteFile(small, []byte("ok"), 0o600)

	sub := func(extra ...string) []string {
		return append([]string{"job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "ci", "--summary", "s"}, extra...)
	}
	tests := []struct {
		name string
		args []string
		code string
		exit int
	}{
		{"unknown job id", []string{"job", "complete", "--job-id", "no-such-job", "--summary", "x"}, "ENOENT", 1},
		{"unknown job id for query", []string{"job", "query", "no-such-job"}, "ENOENT", 1},
		{"complete after cancel", []string{"job", "complete", "--job-id", cancelled, "--summary", "x"}, "ESTATE", 1},
		{"fail after complete", []string{"job", "fail", "--job-id", done, "--reason", "x"}, "ESTATE", 1},
		{"missing result file", []string{"job", "complete", "--job-id", running, "--summary", "x", "--result-file", filepath.Join(dir, "nope")}, "ENOENT", 1},
		{"result file is a directory", []string{"job", "complete", "--job-id", running, "--summary", "x", "--result-file", dir}, "EINVAL", 2},
		{"result file over the limit", []string{"job", "complete", "--job-id", running, "--summary", "x", "--result-file", big}, "EFBIG", 2},
		{"malformed metadata JSON", sub("--metadata-file", badMeta), "EINVAL", 2},
		{"missing metadata file", sub("--metadata-file", filepath.Join(dir, "none.json")), "ENOENT", 1},
		{"unknown target", []string{"job", "submit", "--target", "pager", "--thread-id", "t", "--task-kind", "ci", "--summary", "s"}, "EINVAL", 2},
		{"empty thread id", []string{"job", "submit", "--target", "cli", "--thread-id", "", "--task-kind", "ci", "--summary", "s"}, "EINVAL", 2},
		{"invalid boolean", sub("--delivery-read-only", "yes"), "EINVAL", 2},
		{"invalid boolean (capital)", sub("--delivery-requires-network", "TRUE"), "EINVAL", 2},
		{"empty summary", []string{"job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "ci", "--summary", " "}, "EINVAL", 2},
		{"missing required flag", []string{"job", "submit", "--target", "cli"}, "EINVAL", 2},
		{"empty fail reason", []string{"job", "fail", "--job-id", running, "--reason", ""}, "EINVAL", 2},
	}
	head := h.status().LogHeadSeq
	artifacts, _ := os.ReadDir(filepath.Join(h.root, "artifacts"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.run(append(tt.args, "--json")...)
			var body struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &body); err != nil {
				t.Fatalf("stdout is not a JSON error: %q", r.stdout)
			}
			if body.Error.Code != tt.code || r.code != tt.exit {
				t.Fatalf("got code %s exit %d (%s), want %s exit %d", body.Error.Code, r.code, body.Error.Message, tt.code, tt.exit)
			}
			if !strings.Contains(r.stderr, tt.code) {
				t.Errorf("stderr does not name the code: %q", r.stderr)
			}
			if got := h.status().LogHeadSeq; got != head {
				t.Fatalf("log head moved from %d to %d", head, got)
			}
		})
	}
	after, _ := os.ReadDir(filepath.Join(h.root, "artifacts"))
	if len(after) != len(artifacts) {
		t.Fatalf("artifact store changed: %d entries before, %d after", len(artifacts), len(after))
	}
	// The running job is still completable: nothing above touched it.
	h.ok(nil, "job", "complete", "--job-id", running, "--summary", "x", "--result-file", small)
}

// Every file and directory cbth creates is private: 0700 directories, 0600
// files (the socket included).
func TestHomePermissions(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	id := h.submit("t")
	f := filepath.Join(t.TempDir(), "r")
	os.WriteFile(f, []byte("x"), 0o644)
	h.ok(nil, "job", "complete", "--job-id", id, "--summary", "ok", "--result-file", f)
	n := 0
	err := filepath.WalkDir(h.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		n++
		want := os.FileMode(0o600)
		if fi.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 8 {
		t.Fatalf("walked only %d entries", n)
	}
	fi, err := os.Lstat(filepath.Join(h.root, "run", "cbth.sock"))
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket missing: %v", err)
	}
}

// A peer with another uid gets EACCES even when the file modes would let
// it reach the socket: the daemon checks SO_PEERCRED itself.
func TestForeignUIDRefused(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as uid 65534")
	}
	h := newHome(t)
	h.submit("t")
	head := h.status().LogHeadSeq
	// Open the doors on purpose, to prove the peer check, not the modes.
	binDir := filepath.Dir(cbthBin)
	os.Chmod(binDir, 0o755)
	os.Chmod(cbthBin, 0o755)
	for _, p := range []string{filepath.Dir(h.root), h.root, filepath.Join(h.root, "run")} {
		os.Chmod(p, 0o711)
	}
	os.Chmod(filepath.Join(h.root, "run", "cbth.sock"), 0o666)
	c := h.cmd("job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "k", "--summary", "s", "--json")
	c.Env = append(c.Env, "CBTH_NO_AUTOSTART=1")
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	c.Dir = "/"
	out, _ := c.Output()
	if c.ProcessState.ExitCode() != 13 || !strings.Contains(string(out), `"EACCES"`) {
		t.Fatalf("foreign uid: exit %d, stdout %s; want exit 13 and EACCES", c.ProcessState.ExitCode(), out)
	}
	// The gateway socket checks its peers the same way.
	// (t.TempDir's own directory too: without it the connect fails on
	// the path, before any peer check.)
	os.Chmod(filepath.Dir(filepath.Dir(h.root)), 0o711)
	os.Chmod(filepath.Join(h.root, "run", "gateway.sock"), 0o666)
	c = h.cmd("gateway", "send", "--stream-id", "s", "--seq", "1", "--session-id", "x", "--text", "hi")
	c.Env = append(c.Env, "CBTH_NO_AUTOSTART=1")
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	c.Dir = "/"
	var stderr strings.Builder
	c.Stderr = &stderr
	out, _ = c.Output()
	if c.ProcessState.ExitCode() != 13 || !strings.Contains(string(out), `"error_code":"EACCES"`) {
		t.Fatalf("foreign uid on the gateway: exit %d, stdout %s stderr %s; want exit 13 and EACCES", c.ProcessState.ExitCode(), out, stderr.String())
	}
	if h.status().LogHeadSeq != head {
		t.Fatal("a refused peer changed the log")
	}
}

// Ten racing first commands on a fresh home: one daemon, all ten served.
func TestSingleInstanceUnderRace(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	var wg sync.WaitGroup
	ids := make([]string, 10)
	errc := make(chan string, 10)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := h.run("job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "k", "--summary", "race", "--json")
			var res struct {
				JobID string `json:"job_id"`
			}
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil {
				errc <- fmt.Sprintf("exit %d: %s %s", r.code, r.stdout, r.stderr)
				return
			}
			ids[i] = res.JobID
		}(i)
	}
	wg.Wait()
	close(errc)
	for e := range errc {
		t.Error(e)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == "" || seen[id] {
			t.Fatalf("ids %v: missing or duplicate", ids)
		}
		seen[id] = true
	}
	// Daemons that lost the start race exit on their own once they see
	// the lock held; wait for them, then exactly one must remain.
	waitFor(t, "losing daemons to exit", 10*time.Second, func() bool { return daemonProcesses(h.root) <= 1 })
	if n := daemonProcesses(h.root); n != 1 {
		t.Fatalf("%d daemon processes for one home, want 1", n)
	}
	log, _ := os.ReadFile(filepath.Join(h.root, "log", "daemon.log"))
	if n := strings.Count(string(log), "msg=serving"); n != 1 {
		t.Fatalf("%d daemons served this home, want exactly 1:\n%s", n, log)
	}
	if st := h.status(); st.ActiveJobs != 10 {
		t.Fatalf("active jobs %d, want 10", st.ActiveJobs)
	}
}

// daemonProcesses counts live `cbth --home <root> daemon run` processes.
func daemonProcesses(root string) int {
	n, err := proctest.Count(func(args string) bool {
		return strings.HasPrefix(args, cbthBin+" ") && strings.Contains(args, " "+root+" daemon run")
	})
	if err != nil {
		panic(err)
	}
	return n
}

// A restarted daemon (stopped, or killed -9) finds everything again.
func TestRestartCatchUp(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	a := h.submit("t")
	h.ok(nil, "daemon", "stop")
	waitFor(t, "daemon exit", 10*time.Second, func() bool { return h.pid() == 0 })
	b := h.submit("t")
	pid := h.pid()
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "killed daemon to go", 10*time.Second, func() bool { return h.pid() == 0 })
	var list []struct {
		JobID string `json:"job_id"`
	}
	h.ok(&list, "job", "list")
	if len(list) != 2 || list[0].JobID != a || list[1].JobID != b {
		t.Fatalf("after restart: %+v, want %s and %s", list, a, b)
	}
	h.verify()
}

// The daemon leaves once nothing keeps it busy for the idle timeout, and
// an active job keeps it alive.
func TestIdleExit(t *testing.T) {
	t.Parallel()
	h := newHome(t, "CBTH_IDLE_TIMEOUT=400ms")
	id := h.submit("t")
	pid := h.pid()
	time.Sleep(1500 * time.Millisecond) // well past the idle timeout
	if h.pid() != pid {
		t.Fatal("the daemon exited while a job was active")
	}
	if st := h.status(); len(st.Busy) == 0 || !strings.Contains(st.Busy[0], "active job") {
		t.Fatalf("busy reasons %v do not name the active job", st.Busy)
	}
	h.ok(nil, "job", "fail", "--job-id", id, "--reason", "done")
	waitFor(t, "idle exit", 15*time.Second, func() bool { return h.pid() == 0 })
	log, _ := os.ReadFile(filepath.Join(h.root, "log", "daemon.log"))
	if !strings.Contains(string(log), "idle timeout reached") {
		t.Fatalf("daemon log does not record the idle exit:\n%s", log)
	}
}

func TestVersionHelpAndCompletion(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	var v struct{ Version string }
	h.ok(&v, "version")
	if v.Version == "" {
		t.Fatal("no version")
	}
	// Each script hooks the shell up to this very binary...
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := h.run("completion", sh)
		if r.code != 0 || !strings.Contains(r.stdout, "'"+cbthBin+"'") {
			t.Fatalf("completion %s: exit %d, %q", sh, r.code, r.stdout)
		}
	}
	if _, err := exec.LookPath("bash"); err == nil {
		r := h.run("completion", "bash")
		out, err := exec.Command("bash", "-c", r.stdout+"complete -p cbth").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "complete -C '"+cbthBin+"' cbth") {
			t.Fatalf("bash did not take the script: %v %s", err, out)
		}
	}
	// ...which answers the shell from the command tree: commands, flags
	// and enum values.
	for line, want := range map[string]string{
		"cbth job su":                     "submit\n",
		"cbth job submit --thr":           "--thread-id\n",
		"cbth batch close-head --reason ": "operator_confirmed_delivery\n",
		"cbth completion ":                "fish\n",
	} {
		c := h.cmd()
		c.Env = append(c.Env, "COMP_LINE="+line, "COMP_POINT="+strconv.Itoa(len(line)))
		out, err := c.Output()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("COMP_LINE=%q: %v %q, want %q among the answers", line, err, out, want)
		}
	}
	r := h.run("job", "submit", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "--thread-id") {
		t.Fatalf("help: exit %d %q", r.code, r.stdout)
	}
	// The first screen: commands grouped by what a person does, each on
	// one line, under 60 lines; the detail is one level down.
	r = h.run("--help")
	if n := strings.Count(r.stdout, "\n"); r.code != 0 || n >= 60 || strings.Contains(r.stdout, "job submit") {
		t.Fatalf("cbth --help: exit %d, %d lines:\n%s", r.code, n, r.stdout)
	}
	for _, g := range []string{"Jobs and tasks", "Codex (", "Codex Desktop:", "CortexFS", "Operators:", "Auditors:", "The daemon"} {
		if !strings.Contains(r.stdout, g) {
			t.Errorf("cbth --help has no group %q", g)
		}
	}
	// --version and version: the version and the protocol, exit 0.
	want := fmt.Sprintf("(protocol %d", ipc.Proto)
	for _, args := range [][]string{{"--version"}, {"version"}} {
		if r := h.run(args...); r.code != 0 || !strings.Contains(r.stdout, v.Version) || !strings.Contains(r.stdout, want) {
			t.Errorf("cbth %v: exit %d %q", args, r.code, r.stdout)
		}
	}
	if h.pid() != 0 {
		t.Fatal("version, completion or help started a daemon")
	}
}

// The README's first command: the demo runs the main job end to end in a
// private temporary home and says what happened.
func TestDemo(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	var rep struct {
		Home         string `json:"home"`
		Jobs         []struct{ Status string }
		Deduplicated bool           `json:"dedupe_returned_original"`
		RejectedCode string         `json:"rejected_code"`
		Events       int            `json:"events"`
		Types        map[string]int `json:"event_types"`
		Verified     bool           `json:"verified"`
		Files        []string       `json:"artifact_files"`
		Delivered    bool           `json:"delivered"`
		Echo         string         `json:"echo_jsonl"`
	}
	h.ok(&rep, "demo")
	if len(rep.Jobs) != 3 || !rep.Deduplicated || rep.RejectedCode != "ESTATE" || !rep.Verified || rep.Types["artifact.ingested"] != 1 ||
		len(rep.Files) != 2 || !rep.Delivered || rep.Types["batch.closed"] != 1 || !strings.Contains(rep.Echo, `"text":"hello"`) {
		t.Fatalf("demo report: %+v", rep)
	}
	if _, err := os.Stat(rep.Home); !os.IsNotExist(err) {
		t.Fatalf("the demo left its home behind: %v", err)
	}
	if h.pid() != 0 {
		t.Fatal("the demo touched the caller's home")
	}
}
