package main_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Registering objects is an event; the tree under $CTX_ROOT is its
// projection, written by the daemon and mended from the log at start.
func TestCtxTreeIsAProjection(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	root := filepath.Join(h.root, "ctx")
	h.ctxInit()
	h.ok(nil, "model", "add", "openai/gpt-4o", "--driver", "openai-chat", "--id", "gpt-4o")
	out, err := exec.Command(filepath.Join(root, "model", "main"), "hello").Output()
	if err != nil || !strings.Contains(string(out), `"text":"hello"`) {
		t.Fatalf("model/main: %v %s", err, out)
	}
	var page struct {
		Events []struct{ Type string } `json:"events"`
	}
	if err := callOpArgs(h.root, "events.read", map[string]any{"from": 1}, &page); err != nil {
		t.Fatal(err)
	}
	puts := 0
	for _, e := range page.Events {
		if e.Type == "ctxtree.object_put" {
			puts++
		}
	}
	if puts != 2 {
		t.Fatalf("%d object registrations in the log, want 2 (debug/echo, openai/gpt-4o)", puts)
	}
	// Files lost behind the daemon's back come back from the log.
	h.ok(nil, "daemon", "stop")
	os.RemoveAll(filepath.Join(root, "model", "openai"))
	h.status()
	if _, err := os.Stat(filepath.Join(root, "model", "openai", "gpt-4o.d", "id")); err != nil {
		t.Fatalf("the tree was not rebuilt from the log at start: %v", err)
	}
	// Removing is an event too, and the files follow.
	h.ok(nil, "model", "rm", "openai/gpt-4o")
	if _, err := os.Stat(filepath.Join(root, "model", "openai", "gpt-4o")); !os.IsNotExist(err) {
		t.Fatalf("removed model still on disk: %v", err)
	}
	var list []map[string]any
	h.ok(&list, "model", "list")
	if len(list) != 1 {
		t.Fatalf("model list: %v, want only debug/echo", list)
	}
	h.verify()
}

// servedModel registers a debug model served on its socket (the agent
// socket protocol is the same) and waits for the socket.
func servedModel(t *testing.T, h *homeDir) string {
	h.ctxInit()
	h.ok(nil, "model", "add", "local/chat", "--driver", "debug", "--id", "echo", "--session", "socket")
	sock := filepath.Join(h.root, "ctx", "model", "local", "chat.sock")
	waitFor(t, "the model socket", 10*time.Second, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return sock
}

// serveModel starts `cbth model serve model`, killed when the test ends,
// and reads the first line of its stderr, which must say it serves sock;
// the reader has the rest.
func (h *homeDir) serveModel(model, sock string) (*exec.Cmd, *bufio.Reader) {
	h.t.Helper()
	serve := h.cmd("model", "serve", model)
	stderr, err := serve.StderrPipe()
	if err != nil {
		h.t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { serve.Process.Kill() })
	r := bufio.NewReader(stderr)
	if line, err := r.ReadString('\n'); err != nil || !strings.Contains(line, "serving "+sock) {
		h.t.Fatalf("model serve said %q, %v", line, err)
	}
	return serve, r
}

// A session=socket model is served by the daemon at <model>.sock.
func TestModelSocketServedByDaemon(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	sock := servedModel(t, h)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	frame := func() map[string]any {
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(line, &m)
		return m
	}
	c.Write([]byte(`{"op":"ping"}` + "\n"))
	if m := frame(); m["type"] != "pong" {
		t.Fatalf("ping: %v", m)
	}
	c.Write([]byte(`{"op":"send","id":"m1","input":"hello socket"}` + "\n"))
	var text string
	for {
		m := frame()
		if m["type"] == "delta" {
			text += m["text"].(string)
		}
		if m["type"] == "done" {
			break
		}
	}
	if text != "hello socket" {
		t.Fatalf("deltas said %q", text)
	}

	// The ctx REPL (cbth run as ctx) talks to the same socket: one turn,
	// then the end of input ends it once the run is done.
	ctxBin := filepath.Join(t.TempDir(), "ctx")
	if err := os.Symlink(cbthBin, ctxBin); err != nil {
		t.Fatal(err)
	}
	repl := exec.Command(ctxBin, "model/local/chat", "repl")
	repl.Env = append(os.Environ(), h.env...)
	repl.Stdin = strings.NewReader("hello repl\n")
	out, err := repl.Output()
	if err != nil || string(out) != "hello repl\n" {
		t.Fatalf("ctx model/local/chat: %q, %v", out, err)
	}
	// A model with no socket is ENOENT, not a hang or an EHOSTDOWN.
	missing := exec.Command(ctxBin, "model/local/nosuch")
	missing.Env = repl.Env
	var stderr strings.Builder
	missing.Stderr = &stderr
	err = missing.Run()
	if ee, ok := err.(*exec.ExitError); !ok || !strings.Contains(stderr.String(), "ENOENT") {
		t.Fatalf("ctx on a model without a socket: %v, stderr %q", ee, stderr.String())
	}
}

// ctx init never writes objects whose #! line names a runner that is not
// there: without one beside cbth or on PATH it says how to get one and
// writes nothing; with one on PATH, the objects name it and run.
func TestCtxInitNeedsARunner(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	h := newHome(t, "PATH="+empty)
	r := h.run("ctx", "init", "--json")
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &body); err != nil || r.code != 1 || body.Error.Code != "ENOENT" {
		t.Fatalf("no runner anywhere: exit %d, %q", r.code, r.stdout)
	}
	for _, fix := range []string{"cbth install --prefix /usr", "ctx init --runner PATH"} {
		if !strings.Contains(r.stderr, fix) {
			t.Errorf("the error does not name %q: %s", fix, r.stderr)
		}
	}
	if _, err := os.Lstat(filepath.Join(h.root, "ctx")); !os.IsNotExist(err) {
		t.Fatalf("ctx init wrote a tree anyway: %v", err)
	}
	if h.pid() != 0 {
		t.Fatal("a refused ctx init started the daemon")
	}
	r = h.run("ctx", "init", "--runner", filepath.Join(empty, "cortexfs-object-runner"))
	if r.code != 1 || !strings.Contains(r.stderr, "ENOENT") {
		t.Fatalf("--runner naming nothing: exit %d, %q", r.code, r.stderr)
	}

	bin := t.TempDir()
	runner := filepath.Join(bin, "cortexfs-object-runner")
	if err := os.Symlink(cbthBin, runner); err != nil {
		t.Fatal(err)
	}
	h.env = append(h.env, "PATH="+bin)
	h.ok(nil, "ctx", "init")
	echo := filepath.Join(h.root, "ctx", "model", "debug", "echo")
	b, err := os.ReadFile(echo)
	if err != nil || !strings.HasPrefix(string(b), "#!"+runner+"\n") {
		t.Fatalf("echo object: %q %v; want the runner found on PATH in its #! line", b, err)
	}
	out, err := exec.Command(echo, "hello").Output()
	if err != nil || !strings.Contains(string(out), `"text":"hello"`) {
		t.Fatalf("model/debug/echo: %v %s", err, out)
	}
}

// TestModelServeThroughDaemon: `cbth model serve` has the daemon serve
// the model's socket and holds the daemon up (an attached client) until
// it is interrupted, so the sessions it serves are events like every
// daemon-served session: their directory, deleted, comes back from the
// log at the next start. A model without session=socket is EINVAL. A
// foreground whose daemon stops under it exits EHOSTDOWN.
func TestModelServeThroughDaemon(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.ctxInit()
	h.ok(nil, "model", "add", "local/chat", "--driver", "debug", "--id", "echo", "--session", "socket")
	h.ok(nil, "model", "add", "local/plain", "--driver", "debug", "--id", "echo")
	if r := h.run("model", "serve", "local/plain"); r.code != 2 || !strings.Contains(r.stderr, "EINVAL") {
		t.Fatalf("serve a session=none model: %+v", r)
	}
	sock := filepath.Join(h.root, "ctx", "model", "local", "chat.sock")
	serve, _ := h.serveModel("local/chat", sock)
	if st := h.status(); !strings.Contains(strings.Join(st.Busy, ";"), "integration client") {
		t.Fatalf("the foreground does not hold the daemon up: %v", st.Busy)
	}
	s := dialSock(t, sock)
	if f := s.do(`{"op":"send","id":"m1","session":"fg","input":"through the daemon"}`); f[len(f)-1]["status"] != "ok" {
		t.Fatalf("send: %v", f)
	}
	dir := filepath.Join(h.root, "ctx", "home", itoa(os.Getuid()), "model", "local", "chat.d", "session", "fg")
	before := readTree(t, dir)
	if !strings.Contains(before["latest.md"], "through the daemon") {
		t.Fatalf("session files: %v", before)
	}
	serve.Process.Signal(os.Interrupt)
	if err := serve.Wait(); err != nil {
		t.Fatalf("model serve ended with %v", err)
	}
	s.c.Close()

	// A foreground whose daemon goes away under it says so and exits
	// EHOSTDOWN (unavailable) instead of waiting to be interrupted.
	held, r := h.serveModel("local/chat", sock)
	h.ok(nil, "daemon", "stop")
	// One that keeps waiting is killed, so the test fails, not hangs.
	stuck := time.AfterFunc(30*time.Second, func() { held.Process.Kill() })
	defer stuck.Stop()
	rest, _ := io.ReadAll(r)
	err := held.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != errs.ExitUnavailable || !strings.Contains(string(rest), "EHOSTDOWN") ||
		!strings.Contains(string(rest), "went away") {
		t.Fatalf("model serve after the daemon stopped: %v, stderr %q", err, rest)
	}
	t.Logf("model serve after the daemon stopped: %s", rest)
	os.RemoveAll(dir)
	h.ok(nil, "daemon", "status")
	after := readTree(t, dir)
	if len(after) != len(before) || after["latest.md"] != before["latest.md"] || after["messages.jsonl"] != before["messages.jsonl"] {
		t.Fatalf("the session was not rebuilt from the log:\n%v\nwant\n%v", after, before)
	}
}

// A model's .d/status and .d/log show its real state and its recent
// calls, whichever way they came (a one-shot exec, the daemon's model
// socket, an agent's loop), without what was said (seed 001: .d/ files
// hold no content and no secret); registering more objects keeps them
// (issue 36, C6.15).
func TestModelControlFilesFollowTheCalls(t *testing.T) {
	t.Parallel()
	h := newHome(t, "OPENAI_API_KEY=")
	sock := servedModel(t, h) // local/chat, session=socket, on the debug driver
	ctxRoot := filepath.Join(h.root, "ctx")
	ctl := func(model, file string) string {
		b, err := os.ReadFile(filepath.Join(ctxRoot, "model", model+".d", file))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if s, l := ctl("debug/echo", "status"), ctl("debug/echo", "log"); s != "ready\n" || l != "" {
		t.Fatalf("before any call: status %q, log %q", s, l)
	}
	const said = "the-words-of-the-prompt"
	exec1 := func(model string) (string, int) {
		c := exec.Command(filepath.Join(ctxRoot, "model", model), said)
		c.Env = append(os.Environ(), h.env...)
		out, err := c.Output()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	for range 2 {
		if out, code := exec1("debug/echo"); code != 0 || !strings.Contains(out, said) {
			t.Fatalf("echo: exit %d %s", code, out)
		}
	}
	// Through the daemon's socket.
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte(`{"op":"send","id":"m1","input":"` + said + `"}` + "\n"))
	sc := bufio.NewScanner(c)
	for sc.Scan() && !strings.Contains(sc.Text(), `"done"`) {
	}
	c.Close()
	// Through an agent's loop on debug/echo.
	h.ok(nil, "agent", "add", "asker", "--model", "debug/echo")
	agent := exec.Command(filepath.Join(ctxRoot, "agent", "asker"), said)
	agent.Env = append(os.Environ(), h.env...)
	if out, err := agent.CombinedOutput(); err != nil {
		t.Fatalf("agent: %v\n%s", err, out)
	}
	// A network model with no credential anywhere: unconfigured.
	h.ok(nil, "model", "add", "openai/m", "--driver", "openai-chat", "--id", "m", "--base-url", "http://127.0.0.1:9")
	if _, code := exec1("openai/m"); code == 0 {
		t.Fatal("a model with no credential answered")
	}
	// More registrations rewrite the tree; the calls' files stay.
	h.ok(nil, "model", "add", "local/other", "--driver", "debug", "--id", "echo")
	// model list says the same state.
	var models []struct{ Model, Status string }
	h.ok(&models, "model", "list")
	for _, m := range models {
		if want := map[string]string{"openai/m": "unconfigured"}[m.Model]; want != "" && m.Status != want || want == "" && m.Status != "ready" {
			t.Errorf("model list: %s is %q", m.Model, m.Status)
		}
	}

	lineRe := regexp.MustCompile(`^\d{4}-\d\d-\d\dT[0-9:.]+Z (run=run-[0-9a-f-]+ )?via=(exec|socket|agent)( driver=[a-z0-9-]+)? status=(ok|error code=E[A-Z]+) ms=\d+( input_tokens=\d+ output_tokens=\d+)?$`)
	for model, want := range map[string]struct {
		status string
		vias   []string
		end    string
	}{
		"debug/echo": {"ready\n", []string{"exec", "exec", "agent"}, "status=ok"},
		"local/chat": {"ready\n", []string{"socket"}, "status=ok"},
		"openai/m":   {"unconfigured code=ENOTCONF\n", []string{"exec"}, "status=error code=ENOTCONF"},
	} {
		if s := ctl(model, "status"); s != want.status {
			t.Errorf("%s: status %q, want %q", model, s, want.status)
		}
		log := ctl(model, "log")
		lines := strings.Split(strings.TrimSpace(log), "\n")
		var vias []string
		for _, l := range lines {
			m := lineRe.FindStringSubmatch(l)
			if m == nil {
				t.Errorf("%s: log line %q is not a call line", model, l)
				continue
			}
			vias = append(vias, m[2])
			if !strings.Contains(l, want.end) || (m[2] == "exec") != (m[1] != "") {
				t.Errorf("%s: log line %q", model, l)
			}
		}
		if strings.Join(vias, ",") != strings.Join(want.vias, ",") {
			t.Errorf("%s: calls via %v, want %v\n%s", model, vias, want.vias, log)
		}
		if strings.Contains(log+ctl(model, "status"), said) {
			t.Errorf("%s: the .d files hold what was said:\n%s", model, log)
		}
	}
}
