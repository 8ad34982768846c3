package main_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/confine"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// agentHome is a home with a tree whose agent coder runs the debug model
// with fs.read, shell.exec and cbth.job.submit inside proj (and the
// extra agent add flags a test gives, such as --trusted-all).
type agentHome struct {
	*homeDir
	ctx, proj string
}

func newAgentHome(t *testing.T, add ...string) *agentHome {
	t.Helper()
	return newAgentHomeConfig(t, "", add...)
}

// newAgentHomeConfig is newAgentHome with a config.toml (if not empty)
// written before the daemon first starts.
func newAgentHomeConfig(t *testing.T, config string, add ...string) *agentHome {
	t.Helper()
	h := newHome(t)
	if config != "" {
		if err := os.MkdirAll(h.root, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h.root, "config.toml"), []byte(config), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	proj := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(filepath.Join(proj, "src"), 0o700)
	os.WriteFile(filepath.Join(proj, "README.md"), []byte("hello from the readme\n"), 0o600)
	h.ctxInit()
	h.ok(nil, append([]string{"agent", "add", "coder", "--model", "debug/echo", "--tool", "fs.read", "--tool", "shell.exec", "--tool", "cbth.job.submit", "--root", proj}, add...)...)
	a := &agentHome{homeDir: h, ctx: filepath.Join(h.root, "ctx"), proj: proj}
	waitFor(t, "the agent socket", 10*time.Second, func() bool {
		c, err := net.Dial("unix", a.sock())
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return a
}

func (a *agentHome) sock() string { return filepath.Join(a.ctx, "agent", "coder.sock") }

func (a *agentHome) sessions() string {
	return filepath.Join(a.ctx, "home", itoa(os.Getuid()), "agent", "coder", "session")
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// frames decodes JSONL.
func frames(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("not JSONL: %q", line)
		}
		out = append(out, m)
	}
	return out
}

func ofType(fs []map[string]any, typ string) []map[string]any {
	var out []map[string]any
	for _, f := range fs {
		if f["type"] == typ {
			out = append(out, f)
		}
	}
	return out
}

func text(f map[string]any) string {
	parts, _ := f["content"].([]any)
	var s string
	for _, p := range parts {
		s += p.(map[string]any)["text"].(string)
	}
	return s
}

// TestAgentThroughKernel runs agent/coder and tool objects as the kernel
// does, through their #! line: the debug model scripts fs.read and
// shell.exec, the agent runs them in its root and answers with their
// results; a tool outside the agent's list is refused to the model, not
// run; a tool object run directly is confined to its working directory.
func TestAgentThroughKernel(t *testing.T) {
	t.Parallel()
	a := newAgentHome(t)
	run := func(dir string, stdin string, args ...string) ([]map[string]any, int, string) {
		c := exec.Command(args[0], args[1:]...)
		c.Dir, c.Env = dir, append(os.Environ(), a.env...)
		c.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if out.Len() == 0 {
			return nil, code, errb.String()
		}
		return frames(t, out.Bytes()), code, errb.String()
	}
	agent := filepath.Join(a.ctx, "agent", "coder")
	fs, code, stderr := run(a.proj, "", agent, `!tool fs.read {"path":"README.md"}`, "\n", `!tool shell.exec {"command":"echo ran in $(pwd)"}`, "\n", `!tool fs.write {"path":"x","content":"y"}`)
	if code != 0 || fs[0]["type"] != "start" || fs[len(fs)-1]["status"] != "ok" {
		t.Fatalf("exit %d, stderr %s, frames %v", code, stderr, fs)
	}
	calls := ofType(fs, "tool_call")
	if len(calls) != 3 || calls[0]["name"] != "fs.read" || calls[1]["name"] != "shell.exec" {
		t.Fatalf("tool calls %v", calls)
	}
	var results []string
	for _, m := range ofType(fs, "message") {
		if m["role"] == "tool" {
			results = append(results, text(m))
		}
	}
	if len(results) != 3 || results[0] != "hello from the readme\n" ||
		!strings.Contains(results[1], `"output":"ran in `+a.proj+`\n"`) || !strings.Contains(results[2], `"code":"EACCES"`) {
		t.Fatalf("tool results %q", results)
	}
	if _, err := os.Stat(filepath.Join(a.proj, "x")); err == nil {
		t.Fatal("fs.write ran although the agent may not use it")
	}
	msgs := ofType(fs, "message")
	if last := msgs[len(msgs)-1]; last["role"] != "assistant" || !strings.HasPrefix(text(last), "hello from the readme\n") {
		t.Fatalf("answer %v", last)
	}
	// {"task":...} on stdin works the same.
	fs, code, _ = run(a.proj, `{"task":"plain task"}`, agent)
	if code != 0 || text(ofType(fs, "message")[0]) != "plain task" {
		t.Fatalf("stdin task: %d %v", code, fs)
	}

	// Tool objects: JSON in by argv or stdin, JSONL out, exit codes.
	tool := filepath.Join(a.ctx, "tool", "fs.read")
	if b, _ := os.ReadFile(tool); !bytes.HasPrefix(b, []byte("#!")) || !bytes.Contains(b, []byte("type=tool")) {
		t.Fatalf("tool object file:\n%s", b)
	}
	fs, code, _ = run(a.proj, "", tool, `{"path":"README.md"}`)
	if code != 0 || text(ofType(fs, "message")[0]) != "hello from the readme\n" {
		t.Fatalf("tool/fs.read: %d %v", code, fs)
	}
	fs, code, _ = run(filepath.Join(a.proj, "src"), `{"path":"../README.md"}`, tool)
	if code != 13 || ofType(fs, "error")[0]["code"] != "EACCES" {
		t.Fatalf("tool/fs.read outside its directory: %d %v", code, fs)
	}
	_, code, stderr = run(a.proj, "", tool, `not json`)
	if code != 2 || !strings.Contains(stderr, "EINVAL") {
		t.Fatalf("bad input: %d %s", code, stderr)
	}
}

// sockClient is one connection to a socket.
type sockClient struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialSock(t *testing.T, path string) *sockClient {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &sockClient{t: t, c: c, r: bufio.NewReader(c)}
}

// do sends one request and reads frames up to its done (or a lone error).
func (s *sockClient) do(req string) []map[string]any {
	s.t.Helper()
	if _, err := s.c.Write([]byte(req + "\n")); err != nil {
		s.t.Fatal(err)
	}
	var out []map[string]any
	for {
		line, err := s.r.ReadBytes('\n')
		if err != nil {
			s.t.Fatalf("after %s: %v (frames %v)", req, err, out)
		}
		var m map[string]any
		json.Unmarshal(line, &m)
		out = append(out, m)
		if m["type"] == "done" || m["type"] == "pong" || (m["type"] == "error" && m["run"] == nil) {
			return out
		}
	}
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, _ := d.Info()
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t.Errorf("%s is a symlink", rel)
		case d.IsDir():
			out[rel+"/"] = info.Mode().Perm().String()
		default:
			b, _ := os.ReadFile(p)
			out[rel] = info.Mode().Perm().String() + " " + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAgentSessions drives agent/coder.sock: sessions as directories of
// ordinary files, the index (newest first, reserved names apart from
// session names, temp sessions absent), cwd confinement, and the whole
// product loop: the agent submits a job with cbth.job.submit, a script
// completes it, the result comes back into the same session as a turn and
// the batch closes delivered. Then the session tree is deleted, the
// daemon restarted, and every file comes back byte for byte; the session
// goes on where it was.
func TestAgentSessions(t *testing.T) {
	t.Parallel()
	// Trusted: the job it submits itself has the fail-closed policy, and
	// comes back to it (TestCtxTargetHoldsToTheAgentsTrust has the rest).
	a := newAgentHome(t, "--trusted-all")
	s := dialSock(t, a.sock())
	if f := s.do(`{"op":"ping"}`); f[0]["type"] != "pong" {
		t.Fatalf("ping %v", f)
	}
	first := s.do(`{"op":"send","id":"m1","session":"alpha","cwd":"/src","input":"!tool fs.read {\"path\":\"../README.md\"}"}`)
	if last := first[len(first)-1]; last["status"] != "ok" {
		t.Fatalf("alpha: %v", first)
	}
	for _, sess := range []string{"list", "current", "beta"} { // list and current are ordinary session names
		if f := s.do(`{"op":"send","id":"m1","session":"` + sess + `","input":"hi ` + sess + `"}`); f[len(f)-1]["status"] != "ok" {
			t.Fatalf("%s: %v", sess, f)
		}
	}
	if f := s.do(`{"op":"send","id":"t1","session":"scratch","scope":"temp","input":"not kept"}`); f[len(f)-1]["status"] != "ok" {
		t.Fatalf("temp: %v", f)
	}
	// cwd: missing ENOENT, outside EACCES, the reserved name EINVAL.
	for req, code := range map[string]string{
		`{"op":"send","id":"c1","session":"gamma","cwd":"/missing","input":"x"}`:       "ENOENT",
		`{"op":"send","id":"c2","session":"gamma","cwd":"/../..","input":"x"}`:         "EACCES",
		`{"op":"send","id":"c3","session":"gamma","cwd":"` + a.proj + `","input":"x"}`: "ENOENT",
		`{"op":"send","id":"c4","session":"gamma","cwd":"src/../../etc","input":"x"}`:  "EACCES",
		`{"op":"send","id":"c5","session":"index","input":"x"}`:                        "EINVAL",
		`{"op":"send","id":"c6","session":"gamma","scope":"shared","input":"x"}`:       "EACCES",
		`{"op":"send","id":"c7","session":"gamma","scope":"elsewhere","input":"x"}`:    "EINVAL",
	} {
		if f := s.do(req); f[0]["type"] != "error" || f[0]["code"] != code {
			t.Errorf("%s: %v, want %s", req, f, code)
		}
	}
	// The escape table through the socket: every cwd naming something
	// outside the root is EACCES, however it is spelled.
	outside := filepath.Join(filepath.Dir(a.proj), "secret")
	os.MkdirAll(outside, 0o700)
	for link, to := range map[string]string{"out": outside, "rel-out": "../secret", "hostroot": "/", "abs-in": a.proj + "/src"} {
		if err := os.Symlink(to, filepath.Join(a.proj, link)); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("../../secret", filepath.Join(a.proj, "src", "up-out"))
	escapes := []string{"..", "../", "/..", "../secret", "/src/../../secret", "src/../..", "./../proj", "/out", "/rel-out",
		"/hostroot", "/hostroot/etc", "/hostroot" + a.proj, "/abs-in", "/src/up-out", "/./out/", "src/../../../../etc"}
	for i, cwd := range escapes {
		req, _ := json.Marshal(map[string]string{"op": "send", "id": "esc" + itoa(i), "session": "gamma", "cwd": cwd, "input": "x"})
		if f := s.do(string(req)); f[0]["type"] != "error" || f[0]["code"] != "EACCES" {
			t.Errorf("cwd %q: %v, want EACCES", cwd, f)
		}
	}
	dir := a.sessions()
	index := func() (string, string) {
		l, _ := os.ReadFile(filepath.Join(dir, "index", "list"))
		c, _ := os.ReadFile(filepath.Join(dir, "index", "current"))
		return string(l), string(c)
	}
	if l, c := index(); l != "beta\ncurrent\nlist\nalpha\n" || c != "beta\n" {
		t.Fatalf("index list %q current %q", l, c)
	}
	if _, err := os.Stat(filepath.Join(dir, "scratch")); err == nil {
		t.Fatal("a temp session has a directory")
	}
	if _, err := os.Stat(filepath.Join(dir, "gamma")); err == nil {
		t.Fatal("a refused send opened a session")
	}
	alpha := filepath.Join(dir, "alpha")
	for f, want := range map[string]string{"state": "idle\n", "cwd": "/src\n", "latest.md": "hello from the readme\n"} {
		if b, _ := os.ReadFile(filepath.Join(alpha, f)); string(b) != want {
			t.Errorf("alpha/%s = %q, want %q", f, b, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "index", "by-cwd", sha256hex("/src"))); string(b) != "alpha\n" {
		t.Errorf("by-cwd of /src: %q", b)
	}

	// The loop: the agent submits a job whose result comes back here.
	f := s.do(`{"op":"send","id":"m2","session":"alpha","input":"!tool cbth.job.submit {\"summary\":\"run the slow tests\"}"}`)
	var job struct {
		JobID    string `json:"job_id"`
		ThreadID string `json:"source_thread_id"`
	}
	for _, m := range ofType(f, "message") {
		if m["role"] == "tool" {
			json.Unmarshal([]byte(text(m)), &job)
		}
	}
	if job.JobID == "" || job.ThreadID != "agent/coder/alpha" {
		t.Fatalf("job.submit answered %v", f)
	}
	a.ok(nil, "job", "complete", "--job-id", job.JobID, "--summary", "slow tests passed")
	var w struct {
		Jobs []struct {
			CloseReason string `json:"close_reason"`
		} `json:"jobs"`
	}
	a.ok(&w, "wait", "--job-id", job.JobID, "--timeout", "60s")
	if len(w.Jobs) != 1 || w.Jobs[0].CloseReason != "delivered" {
		t.Fatalf("wait: %+v", w)
	}
	var hist struct {
		Session  string `json:"session"`
		Messages []struct {
			Role, Content string
		} `json:"messages"`
	}
	a.ok(&hist, "ctx", "history", "coder", "--session", "alpha")
	turn := hist.Messages[len(hist.Messages)-2]
	if turn.Role != "user" || !strings.Contains(turn.Content, "slow tests passed") || !strings.Contains(turn.Content, job.JobID) {
		t.Fatalf("the result is not a turn of alpha: %+v", hist.Messages)
	}
	if l, _ := index(); !strings.HasPrefix(l, "alpha\n") {
		t.Fatalf("the delivered turn did not make alpha the newest: %q", l)
	}
	var latest struct{ Latest string }
	a.ok(&latest, "ctx", "latest", "coder")
	if !strings.Contains(latest.Latest, "slow tests passed") {
		t.Fatalf("ctx latest: %q", latest.Latest)
	}
	var rows []struct{ Session, State string }
	a.ok(&rows, "ctx", "session", "list", "coder")
	if len(rows) != 4 || rows[0].Session != "alpha" || rows[0].State != "idle" {
		t.Fatalf("session list: %+v", rows)
	}

	// Delete the whole session tree (index included), restart: the files
	// come back byte for byte, from the log alone.
	before := readTree(t, dir)
	s.c.Close()
	a.ok(nil, "daemon", "stop")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	a.ok(nil, "daemon", "status")
	after := readTree(t, dir)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s after the rebuild:\n%q\nwant\n%q", k, after[k], v)
		}
	}
	if len(after) != len(before) {
		t.Errorf("rebuilt %d entries, had %d", len(after), len(before))
	}

	// The session survived socket close and restart: a retried message id
	// replays its run, resume replays the stored frames, a new turn goes
	// on with the history.
	waitFor(t, "the agent socket after restart", 10*time.Second, func() bool {
		c, err := net.Dial("unix", a.sock())
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	s = dialSock(t, a.sock())
	retry := s.do(`{"op":"send","id":"m1","session":"alpha","input":"ignored"}`)
	if retry[0]["run"] != first[0]["run"] || len(retry) != len(first) {
		t.Fatalf("retry after restart: %v, first %v", retry, first)
	}
	again := s.do(`{"op":"send","id":"m3","session":"alpha","input":"still here"}`)
	if again[len(again)-1]["status"] != "ok" || again[0]["id"] == "e1" {
		t.Fatalf("next turn: %v", again)
	}
}

func sha256hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestAgentSharedScope: scope shared is allowed exactly where config.toml
// puts the object in a [[ctx.shared]] space. coder is in space team: its
// shared sessions are events projected under ctx/shared/team/agent/coder/
// session/ (with their own index), apart from its private sessions of the
// same name, and rebuilt at start like them; agent other is in no space
// and still refuses shared with EACCES.
func TestAgentSharedScope(t *testing.T) {
	t.Parallel()
	a := newAgentHomeConfig(t, "[[ctx.shared]]\nname = \"team\"\nobjects = [\"agent/coder\"]\n")
	a.ok(nil, "agent", "add", "other", "--model", "debug/echo")
	other := filepath.Join(a.ctx, "agent", "other.sock")
	waitFor(t, "agent other's socket", 10*time.Second, func() bool {
		c, err := net.Dial("unix", other)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	s := dialSock(t, a.sock())
	if f := s.do(`{"op":"send","id":"s1","session":"plan","scope":"shared","input":"team notes"}`); f[len(f)-1]["status"] != "ok" {
		t.Fatalf("shared send: %v", f)
	}
	if f := s.do(`{"op":"send","id":"p1","session":"plan","input":"my notes"}`); f[len(f)-1]["status"] != "ok" {
		t.Fatalf("private send: %v", f)
	}
	shared := filepath.Join(a.ctx, "shared", "team", "agent", "coder", "session")
	for f, want := range map[string]string{"plan/latest.md": "team notes", "index/list": "plan\n", "index/current": "plan\n"} {
		if b, _ := os.ReadFile(filepath.Join(shared, f)); string(b) != want {
			t.Errorf("shared %s = %q, want %q", f, b, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(shared, "plan", "meta.json")); !strings.Contains(string(b), `"scope":"shared"`) {
		t.Errorf("shared meta.json: %s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(a.sessions(), "plan", "latest.md")); string(b) != "my notes" {
		t.Errorf("the private session of the same name: %q", b)
	}
	// resume in scope shared replays the shared session only.
	res := s.do(`{"op":"resume","id":"r1","session":"plan","scope":"shared"}`)
	joined, _ := json.Marshal(res)
	if !strings.Contains(string(joined), "team notes") || strings.Contains(string(joined), "my notes") {
		t.Fatalf("shared resume: %s", joined)
	}
	o := dialSock(t, other)
	if f := o.do(`{"op":"send","id":"x1","session":"plan","scope":"shared","input":"x"}`); f[0]["type"] != "error" || f[0]["code"] != "EACCES" {
		t.Fatalf("shared on an agent in no space: %v, want EACCES", f)
	}
	if _, err := os.Stat(filepath.Join(a.ctx, "shared", "team", "agent", "other")); err == nil {
		t.Fatal("a refused shared send made a directory")
	}

	// Deleted, the shared tree comes back from the log at start.
	before := readTree(t, shared)
	s.c.Close()
	o.c.Close()
	a.ok(nil, "daemon", "stop")
	if err := os.RemoveAll(shared); err != nil {
		t.Fatal(err)
	}
	a.ok(nil, "daemon", "status")
	after := readTree(t, shared)
	if len(after) != len(before) {
		t.Errorf("rebuilt %d entries, had %d", len(after), len(before))
	}
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s after the rebuild: %q, want %q", k, after[k], v)
		}
	}
}

// TestCtxDeliveryReconciledAtRestart kills the daemon (SIGKILL) while a
// ctx delivery's agent run is going on (the turn's shell.exec sleeps), so
// its attempt is left accept_pending. At start the ctx target's reconcile
// hook reads the session's log: the turn's message is there, so the
// attempt is recorded accepted with that run as its turn, and the run,
// cut off with the daemon, is the turn's end (turn_interrupted): the batch
// is parked for that reason, fail-closed since the run's tools may have
// acted, not as an unknown acceptance; it is never delivered again.
func TestCtxDeliveryReconciledAtRestart(t *testing.T) {
	t.Parallel()
	// Trusted: the result it is delivered runs shell.exec.
	a := newAgentHomeConfig(t, "[delivery]\nmax_wait_window = \"0s\"\nsweep_interval = \"20ms\"\ndelivery_timeout = \"1h\"\n", "--trusted-all")
	var res struct {
		JobID string `json:"job_id"`
	}
	a.ok(&res, "job", "submit", "--target", "ctx", "--thread-id", "agent/coder/alpha", "--task-kind", "ci", "--summary", "slow work")
	// The turn's shell.exec outlives the daemon's kill (its own process
	// group); it says its pid so the test can end it.
	a.ok(nil, "job", "complete", "--job-id", res.JobID, "--summary", "slow\n"+`!tool shell.exec {"command":"echo $$ > sleeper.pid; exec sleep 30"}`)
	t.Cleanup(func() {
		b, _ := os.ReadFile(filepath.Join(a.proj, "sleeper.pid"))
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			syscall.Kill(-pid, syscall.SIGKILL)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	events := filepath.Join(a.sessions(), "alpha", "events.jsonl")
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(events)
		if strings.Contains(string(b), `"type":"tool_call"`) {
			break
		}
		if time.Now().After(deadline) {
			r := a.run("batch", "inspect-head", "--source-thread-id", "agent/coder/alpha", "--json")
			t.Fatalf("no tool call in the delivered turn:\n%s\n%+v", b, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var in struct {
		Batch struct {
			ID     string `json:"batch_id"`
			State  string `json:"state"`
			Replay string `json:"replay_policy"`
			Reason string `json:"replay_policy_reason"`
		} `json:"batch"`
		Head *struct {
			State  string `json:"state"`
			TurnID string `json:"delivery_turn_id"`
		} `json:"head_attempt"`
	}
	a.ok(&in, "batch", "inspect-head", "--source-thread-id", "agent/coder/alpha")
	if in.Head == nil || in.Head.State != "accept_pending" {
		t.Fatalf("before the kill: %+v", in)
	}
	pid := a.pid()
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, "the daemon to die", 10*time.Second, func() bool { return a.pid() != pid })
	a.ok(nil, "daemon", "status") // starts it again: reconcile runs
	var after struct {
		Batch struct {
			State  string `json:"state"`
			Replay string `json:"replay_policy"`
			Reason string `json:"replay_policy_reason"`
		} `json:"batch"`
		Attempts []struct {
			State    string `json:"state"`
			TurnID   string `json:"delivery_turn_id"`
			RPCState string `json:"delivery_rpc_state"`
		} `json:"attempts"`
	}
	a.ok(&after, "batch", "inspect", "--batch-id", in.Batch.ID)
	if after.Batch.Replay != "manual_resolution_only" || !strings.Contains(after.Batch.Reason, "turn_interrupted") {
		t.Fatalf("after the restart: batch %+v, want parked for turn_interrupted", after.Batch)
	}
	if len(after.Attempts) != 1 || after.Attempts[0].TurnID == "" || after.Attempts[0].RPCState == "acceptance_unknown" {
		t.Fatalf("the attempt was not proven accepted with its run: %+v", after.Attempts)
	}
	var hist struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	a.ok(&hist, "ctx", "history", "coder", "--session", "alpha")
	users := 0
	for _, m := range hist.Messages {
		if m.Role == "user" {
			users++
		}
	}
	if users != 1 {
		t.Fatalf("the turn was delivered %d times: %+v", users, hist.Messages)
	}

	// The cut run was ended at the start, after the reconcile above read
	// it as cut: its session says error (not active forever), and its
	// events end the run as interrupted with a reason code; another start
	// appends nothing more.
	var show struct{ State string }
	a.ok(&show, "ctx", "session", "show", "coder", "alpha")
	if show.State != "error" {
		t.Fatalf("session show after the restart: state %q, want error", show.State)
	}
	state, _ := os.ReadFile(filepath.Join(a.sessions(), "alpha", "state"))
	if strings.TrimSpace(string(state)) != "error" {
		t.Fatalf("state file after the restart: %q", state)
	}
	ended, _ := os.ReadFile(events)
	lines := strings.Split(strings.TrimSpace(string(ended)), "\n")
	if len(lines) < 2 || !strings.Contains(lines[len(lines)-2], `"code":"EHOSTDOWN"`) ||
		!strings.Contains(lines[len(lines)-1], `"type":"done"`) || !strings.Contains(lines[len(lines)-1], `"status":"interrupted"`) {
		t.Fatalf("the cut run was not ended as interrupted:\n%s", ended)
	}
	a.ok(nil, "daemon", "stop")
	a.ok(nil, "daemon", "status")
	if again, _ := os.ReadFile(events); string(again) != string(ended) {
		t.Fatalf("a second start changed the events:\n%s\nwas\n%s", again, ended)
	}
	a.ok(&after, "batch", "inspect", "--batch-id", in.Batch.ID)
	if after.Batch.Replay != "manual_resolution_only" || !strings.Contains(after.Batch.Reason, "turn_interrupted") {
		t.Fatalf("after a second start: batch %+v", after.Batch)
	}
}

// TestAgentOnNetworkModelSession runs an agent on a network model (the
// openai-chat driver through the real cbth-providers helper, against a
// fake provider on 127.0.0.1) over its daemon-served socket: the turn
// offers the tools, runs the model's fs.read call in the agent's root and
// answers with the file's text; after a daemon restart the next turn
// sends the stored history back, the assistant's call and the tool's
// result in the provider's shape (the fake refuses a result that answers
// no call in the history), so the loop's history survives as events.
func TestAgentOnNetworkModelSession(t *testing.T) {
	t.Parallel()
	helper := providersBin(t)
	const key = "sk-AGENT-TEST-KEY-1234"
	srv := fakeprovider.Start(fakeprovider.OpenAIChat, key)
	defer srv.Close()
	h := newHome(t, "CBTH_PROVIDERS="+helper, "OPENAI_API_KEY="+key)
	proj := filepath.Join(t.TempDir(), "proj")
	os.MkdirAll(proj, 0o700)
	os.WriteFile(filepath.Join(proj, "note.txt"), []byte("buy milk"), 0o600)
	h.ctxInit()
	h.ok(nil, "model", "add", "openai/m", "--driver", "openai-chat", "--id", fakeprovider.AgentModel, "--base-url", srv.BaseURL())
	h.ok(nil, "agent", "add", "coder", "--model", "openai/m", "--tool", "fs.read", "--root", proj)
	sock := filepath.Join(h.root, "ctx", "agent", "coder.sock")
	up := func() {
		waitFor(t, "the agent socket", 10*time.Second, func() bool {
			c, err := net.Dial("unix", sock)
			if err == nil {
				c.Close()
			}
			return err == nil
		})
	}
	up()
	s := dialSock(t, sock)
	f := s.do(`{"op":"send","id":"n1","session":"net","input":"what does the note say?"}`)
	joined, _ := json.Marshal(f)
	for _, want := range []string{`"name":"fs.read"`, `"text":"buy milk"`, `"text":"the note says: buy milk"`} {
		if !strings.Contains(string(joined), want) {
			t.Fatalf("first turn lacks %s: %s", want, joined)
		}
	}
	if f[len(f)-1]["status"] != "ok" {
		t.Fatalf("first turn: %s", joined)
	}
	s.c.Close()
	h.ok(nil, "daemon", "stop")
	h.ok(nil, "daemon", "status")
	up()
	s = dialSock(t, sock)
	f = s.do(`{"op":"send","id":"n2","session":"net","input":"and again?"}`)
	if f[len(f)-1]["status"] != "ok" {
		t.Fatalf("second turn after restart: %v", f)
	}
	bodies := srv.Bodies()
	if len(bodies) != 3 {
		t.Fatalf("%d model calls, want 3", len(bodies))
	}
	last := bodies[2]
	for _, want := range []string{`"tool_calls":[{"id":"` + fakeprovider.AgentCallID + `"`, `"role":"tool"`, `"tool_call_id":"` + fakeprovider.AgentCallID + `"`, `"and again?"`} {
		if !strings.Contains(last, want) {
			t.Errorf("the history sent after the restart lacks %s: %s", want, last)
		}
	}
	if strings.Contains(strings.Join(bodies, ""), key) {
		t.Fatal("the key travelled in a request body")
	}
}

var (
	providersOnce sync.Once
	providersPath string
	providersErr  error
)

// providersBin builds the cbth-providers helper once for the package's
// tests, into its own directory (not beside cbth, where the runner would
// find it for every test), removed by TestMain.
func providersBin(t *testing.T) string {
	t.Helper()
	providersOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cbth-providers-")
		if err != nil {
			providersErr = err
			return
		}
		providersPath = filepath.Join(dir, "cbth-providers")
		if out, err := exec.Command("go", "build", "-o", providersPath, "../cbth-providers").CombinedOutput(); err != nil {
			providersErr = fmt.Errorf("build cbth-providers: %v\n%s", err, out)
		}
	})
	if providersErr != nil {
		t.Fatal(providersErr)
	}
	return providersPath
}

// The ctx target holds a batch's delivery policy against the agent's own
// permissions: coder can act (shell.exec), so a result with the
// fail-closed default policy is parked with the reason and its text
// never becomes a turn (the shell.exec in it never runs), while a
// read-only, no-approval result is delivered; an agent that can only
// read takes any result.
func TestCtxTargetHoldsToTheAgentsTrust(t *testing.T) {
	t.Parallel()
	a := newAgentHomeConfig(t, "[delivery]\nmax_wait_window = \"0s\"\n")
	a.ok(nil, "agent", "add", "reader", "--model", "debug/echo", "--tool", "fs.read", "--root", a.proj)
	submit := func(thread string, policy ...string) string {
		var res struct {
			JobID string `json:"job_id"`
		}
		a.ok(&res, append([]string{"job", "submit", "--target", "ctx", "--thread-id", thread, "--task-kind", "ci", "--summary", "work"}, policy...)...)
		a.ok(nil, "job", "complete", "--job-id", res.JobID, "--summary", "done\n"+`!tool shell.exec {"command":"touch pwned"}`)
		return res.JobID
	}
	closed := func(job string) string {
		var w struct {
			Jobs []struct {
				CloseReason string `json:"close_reason"`
			} `json:"jobs"`
		}
		a.ok(&w, "wait", "--job-id", job, "--timeout", "60s")
		return w.Jobs[0].CloseReason
	}

	submit("agent/coder/alpha")
	var in struct {
		Batch struct {
			Replay string `json:"replay_policy"`
			Reason string `json:"replay_policy_reason"`
		} `json:"batch"`
	}
	waitFor(t, "the batch to be parked", 30*time.Second, func() bool {
		a.ok(&in, "batch", "inspect-head", "--source-thread-id", "agent/coder/alpha")
		return in.Batch.Replay == "manual_resolution_only"
	})
	for _, w := range []string{"can act (shell.exec)", "requires_approval=true", "--trusted-all"} {
		if !strings.Contains(in.Batch.Reason, w) {
			t.Errorf("park reason %q does not say %q", in.Batch.Reason, w)
		}
	}

	readOnly := []string{"--delivery-read-only", "true", "--delivery-requires-approval", "false",
		"--delivery-requires-network", "false", "--delivery-requires-write-access", "false"}
	if r := closed(submit("agent/reader/alpha")); r != "delivered" {
		t.Errorf("a read-only agent's result: %s, want delivered", r)
	}
	if _, err := os.Stat(filepath.Join(a.proj, "pwned")); !os.IsNotExist(err) {
		t.Fatalf("a result's shell.exec ran in coder/alpha or reader: %v", err)
	}
	if r := closed(submit("agent/coder/beta", readOnly...)); r != "delivered" {
		t.Errorf("a read-only, no-approval result to coder: %s, want delivered", r)
	}
	// The delivered turn ran its shell.exec: coder has it, and the
	// submitter declared the result needs nothing.
	if _, err := os.Stat(filepath.Join(a.proj, "pwned")); err != nil {
		t.Errorf("the read-only result's turn did not run: %v", err)
	}
}

// A FIFO in an agent's root wedges nothing: fs.read and fs.write refuse
// anything that is not a regular file (EINVAL) without blocking in the
// open, fs.search skips it, and the session goes on taking turns.
func TestAgentToolsRefuseAFIFO(t *testing.T) {
	t.Parallel()
	a := newAgentHome(t)
	if err := syscall.Mkfifo(filepath.Join(a.proj, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.ok(nil, "agent", "add", "fifo", "--model", "debug/echo", "--tool", "fs.read", "--tool", "fs.write", "--tool", "fs.search", "--root", a.proj)
	sock := filepath.Join(a.ctx, "agent", "fifo.sock")
	waitFor(t, "the agent socket", 10*time.Second, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	s := dialSock(t, sock)
	// A wedged tool would hold the turn for good: fail instead.
	s.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	f := s.do(`{"op":"send","id":"f1","session":"alpha","input":"` +
		`!tool fs.read {\"path\":\"pipe\"}\n!tool fs.write {\"path\":\"pipe\",\"content\":\"x\"}\n!tool fs.search {\"pattern\":\"readme\"}"}`)
	var results []string
	for _, m := range ofType(f, "message") {
		if m["role"] == "tool" {
			results = append(results, text(m))
		}
	}
	if len(results) != 3 || f[len(f)-1]["status"] != "ok" {
		t.Fatalf("turn: %v", f)
	}
	for i, r := range results[:2] {
		if !strings.Contains(r, `"code":"EINVAL"`) || !strings.Contains(r, "not a regular file") {
			t.Errorf("call %d on the FIFO: %s, want EINVAL", i+1, r)
		}
	}
	if !strings.Contains(results[2], "/README.md:1:hello from the readme") {
		t.Errorf("fs.search beside the FIFO: %q", results[2])
	}
	if f := s.do(`{"op":"send","id":"f2","session":"alpha","input":"still here"}`); f[len(f)-1]["status"] != "ok" {
		t.Fatalf("next turn: %v", f)
	}
}

// confined reports this machine's confinement the way cbth doctor does,
// and checks doctor says the same.
func (a *agentHome) confined() bool {
	a.t.Helper()
	rep, _ := a.doctor()
	f := rep.get("confinement")
	st := confine.Check()
	if (f.State == "ok") != (st.Available && len(st.Unconfined()) == 0) || f.Detail == "" {
		a.t.Fatalf("doctor's confinement finding %+v disagrees with %+v", f, st)
	}
	return st.Available
}

// shell.exec run by an agent is confined to its root where the system
// can (Landlock here when the kernel has it): a file outside the root
// is neither read nor written, by any path the command spells; inside
// the root it works, in the session's cwd. Without the means the command
// runs, unconfined, and says so loudly (stderr, doctor).
func TestAgentShellExecIsConfined(t *testing.T) {
	t.Parallel()
	a := newAgentHome(t)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("top-secret\n"), 0o600)
	os.Symlink(outside, filepath.Join(a.proj, "out"))
	cmd := fmt.Sprintf(`cat %s/secret out/secret; echo x > %s/new; echo in > inside; pwd`, outside, outside)
	c := exec.Command(filepath.Join(a.ctx, "agent", "coder"), `!tool shell.exec {"command":"`+cmd+`"}`)
	c.Dir, c.Env = a.proj, append(os.Environ(), a.env...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var res struct {
		Output string `json:"output"`
	}
	for _, m := range ofType(frames(t, stdout.Bytes()), "message") {
		if m["role"] == "tool" {
			json.Unmarshal([]byte(text(m)), &res)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(a.proj, "inside")); string(b) != "in\n" || !strings.HasSuffix(res.Output, a.proj+"\n") {
		t.Fatalf("inside the root: %q, output %q", b, res.Output)
	}
	_, statErr := os.Stat(filepath.Join(outside, "new"))
	if st := confine.Check(); st.Available {
		if strings.Contains(res.Output, "top-secret") || statErr == nil || strings.Count(res.Output, "Permission denied") < 3 {
			t.Fatalf("confined by %s, yet the command reached outside its root: %q (new file: %v)", st.Mechanism, res.Output, statErr)
		}
	} else if !strings.Contains(stderr.String(), "UNCONFINED") || !strings.Contains(res.Output, "top-secret") {
		t.Fatalf("unconfined without a warning, or confined after all: stderr %q, output %q", stderr.String(), res.Output)
	}
	if !a.confined() { // and doctor says the same
		// The unconfined half held; the confinement this test is named
		// for cannot be shown here: say so (.ci/skips).
		t.Skipf("no confinement on this machine (%s): only the warning was checked", confine.Check().Mechanism)
	}
}

// What an agent's shell.exec creates in its root keeps the home's modes
// (files 0600, directories 0700) whatever umask the caller has: the
// root is inside the home by default, and doctor's home.permissions
// stays ok after ordinary agent use (issue 36, C2.11). fs.write gives
// 0600 on its own; shell.exec's programs get the confine wrapper's umask.
func TestAgentFilesKeepTheHomesModes(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.ctxInit()
	h.ok(nil, "agent", "add", "maker", "--model", "debug/echo", "--tool", "shell.exec", "--tool", "fs.write")
	agent := filepath.Join(h.root, "ctx", "agent", "maker")
	root := filepath.Join(h.root, "ctx", "home", itoa(os.Getuid()), "agent", "maker", "root")
	for _, call := range []string{
		`!tool shell.exec {"command":"echo x > made; mkdir dir; echo y > dir/inner"}`,
		`!tool fs.write {"path":"written","content":"z"}`,
	} {
		// The caller's umask would let the group and others read.
		c := exec.Command("/bin/sh", "-c", `umask 022; exec "$0" "$1"`, agent, call)
		c.Env = append(os.Environ(), h.env...)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", call, err, out)
		}
	}
	for rel, want := range map[string]os.FileMode{"made": 0o600, "dir": 0o700 | os.ModeDir, "dir/inner": 0o600, "written": 0o600} {
		st, err := os.Stat(filepath.Join(root, rel))
		if err != nil {
			t.Fatalf("the agent made no %s: %v", rel, err)
		}
		if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", rel, st.Mode(), want)
		}
	}
	rep, r := h.doctor()
	if f := rep.get("home.permissions"); f.State != "ok" {
		t.Fatalf("doctor after the agent's files: %+v (exit %d)\n%s", f, r.code, r.stdout)
	}
}

// The provider helper starts with its own environment, not the caller's
// (PATH, HOME, LANG, TERM, the provider's own key and the keychain's bus;
// not another provider's key nor anything else), from "/", and confined
// where the system can. The fake helper reports what it got.
func TestProviderHelperGetsItsOwnEnvironment(t *testing.T) {
	t.Parallel()
	a := newAgentHome(t)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("top-secret\n"), 0o600)
	helper := filepath.Join(t.TempDir(), "cbth-providers")
	script := "#!/bin/sh\nread -r line\nnames=$(env | cut -d= -f1 | sort | tr '\\n' ' ')\n" +
		"if cat " + outside + "/secret >/dev/null 2>&1; then r=readable; else r=denied; fi\n" +
		`printf '{"type":"error","code":"EINVAL","message":"env: %s cwd: %s secret: %s"}\n{"type":"done","status":"error"}\n' "$names" "$(pwd)" "$r"` + "\n"
	if err := os.WriteFile(helper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	a.ok(nil, "model", "add", "openai/m", "--driver", "openai-chat", "--id", "m", "--base-url", "http://127.0.0.1:9")
	c := exec.Command(filepath.Join(a.ctx, "model", "openai", "m"), "hi")
	c.Dir = a.proj
	c.Env = append(os.Environ(), append(a.env, "CBTH_PROVIDERS="+helper, "OPENAI_API_KEY=sk-own", "ANTHROPIC_API_KEY=sk-other",
		"CBTH_LEAK_CANARY=1", "LANG=C.UTF-8")...)
	out, _ := c.CombinedOutput()
	var msg string
	for _, f := range ofType(frames(t, out[:bytes.LastIndexByte(out, '}')+1]), "error") {
		msg, _ = f["message"].(string)
	}
	if msg == "" {
		t.Fatalf("the helper's report is missing:\n%s", out)
	}
	for _, w := range []string{"OPENAI_API_KEY", "PATH", "HOME", "LANG", "cwd: / "} {
		if !strings.Contains(msg, w) {
			t.Errorf("the helper lacks %q: %s", w, msg)
		}
	}
	for _, w := range []string{"ANTHROPIC_API_KEY", "CBTH_LEAK_CANARY", "CBTH_PROVIDERS", "CBTH_HOME"} {
		if strings.Contains(msg, w) {
			t.Errorf("the helper got %s: %s", w, msg)
		}
	}
	want := "secret: readable"
	if a.confined() {
		want = "secret: denied"
	}
	if !strings.Contains(msg, want) {
		t.Errorf("want %q: %s", want, msg)
	}
}

// A file name with a newline cannot forge entries of fs.list or fs.search
// answers: such a name is a JSON string on its one line.
func TestAgentListingsQuoteNewlines(t *testing.T) {
	t.Parallel()
	a := newAgentHome(t)
	evil := "evil\nghost.md"
	if err := os.WriteFile(filepath.Join(a.proj, evil), []byte("needle\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.ok(nil, "agent", "add", "lister", "--model", "debug/echo", "--tool", "fs.list", "--tool", "fs.search", "--root", a.proj)
	c := exec.Command(filepath.Join(a.ctx, "agent", "lister"), `!tool fs.list {}`, "\n", `!tool fs.search {"pattern":"needle"}`)
	c.Dir, c.Env = a.proj, append(os.Environ(), a.env...)
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var results []string
	for _, m := range ofType(frames(t, out), "message") {
		if m["role"] == "tool" {
			results = append(results, text(m))
		}
	}
	if len(results) != 2 {
		t.Fatalf("results %q", results)
	}
	quoted, _ := json.Marshal(evil)
	for i, want := range []string{string(quoted) + "\n", `"/evil\nghost.md":1:needle` + "\n"} {
		lines := strings.SplitAfter(results[i], "\n")
		forged := slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "ghost.md") })
		if !slices.Contains(lines, want) || forged {
			t.Errorf("answer %d: %q, want the line %q and no forged one", i, results[i], want)
		}
	}
}

// ctx agent/<name> (the socket REPL) starts the daemon when none runs,
// as every other command does, and has it serve the agent's socket.
func TestCtxAgentREPLStartsTheDaemon(t *testing.T) {
	t.Parallel()
	a := newAgentHome(t)
	a.ok(nil, "daemon", "stop")
	waitFor(t, "the daemon to stop", 10*time.Second, func() bool { return a.pid() == 0 })
	ctxBin := filepath.Join(t.TempDir(), "ctx")
	if err := os.Symlink(cbthBin, ctxBin); err != nil {
		t.Fatal(err)
	}
	repl := exec.Command(ctxBin, "agent/coder", "repl")
	repl.Env = append(os.Environ(), a.env...)
	repl.Stdin = strings.NewReader("hello agent\n")
	var stderr strings.Builder
	repl.Stderr = &stderr
	out, err := repl.Output()
	if err != nil || !strings.Contains(string(out), "hello agent") {
		t.Fatalf("ctx agent/coder: %q, %v, stderr %q", out, err, stderr.String())
	}
	if a.pid() == 0 {
		t.Error("no daemon runs after the REPL")
	}
}
