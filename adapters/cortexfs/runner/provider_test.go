package runner_test

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/internal/execfile"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
	"github.com/cbth-dev/cbth/internal/testkit/proctest"
)

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := execfile.Put(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestNetworkModelThroughInstalledLayout runs a network driver end to end
// through real files, laid out as installed: the object's shebang names a
// cortexfs-object-runner symlink in another directory, which points at
// cbth; the runner finds cbth-providers next to the resolved cbth; the
// helper calls the fake provider on 127.0.0.1 with the key it resolved
// from its environment.
func TestNetworkModelThroughInstalledLayout(t *testing.T) {
	runnerSrc, helperSrc := bins(t)
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	copyFile(t, runnerSrc, filepath.Join(real, "cbth"))
	links := filepath.Join(dir, "links")
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	runner := filepath.Join(links, "cortexfs-object-runner")
	if err := os.Symlink(filepath.Join(real, "cbth"), runner); err != nil {
		t.Fatal(err)
	}
	srv := fakeprovider.Start(fakeprovider.Anthropic, secret)
	defer srv.Close()
	root := filepath.Join(dir, "ctx")
	set := tree.Set{Runner: runner, Objects: []object.Object{
		model("anthropic/claude", "ok", "anthropic-messages", object.KV{Key: "base_url", Value: srv.BaseURL()}),
	}}
	if err := tree.Materialize(root, set); err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(root, "model/anthropic/claude")
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "ANTHROPIC_API_KEY=" + secret}
	run := func(extra ...string) (string, string, int) {
		cmd := exec.Command(obj, "hello")
		cmd.Env = append(append([]string(nil), env...), extra...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		out := runID.ReplaceAllString(stdout.String(), "RUN")
		if strings.Contains(out+stderr.String(), secret) {
			t.Fatalf("secret leaked:\n%s%s", out, stderr.String())
		}
		return out, stderr.String(), code
	}

	// No helper anywhere: a stable ENOTCONF, exit 69.
	out, _, code := run()
	if code != 69 || !strings.Contains(out, `"code":"ENOTCONF"`) || !strings.Contains(out, "cbth-providers is not installed") {
		t.Fatalf("without helper: exit %d\n%s", code, out)
	}

	// The helper next to the resolved binary.
	copyFile(t, helperSrc, filepath.Join(real, "cbth-providers"))
	want := `{"type":"start","run":"RUN","model":"anthropic/claude"}
{"type":"delta","run":"RUN","text":"Hel"}
{"type":"delta","run":"RUN","text":"lo"}
{"type":"message","run":"RUN","role":"assistant","content":[{"type":"text","text":"Hello"}]}
{"type":"usage","run":"RUN","input_tokens":5,"output_tokens":2}
{"type":"done","run":"RUN","status":"ok"}
`
	out, stderr, code := run()
	if code != 0 || out != want || stderr != "" {
		t.Fatalf("next to cbth: exit %d\n%s\nstderr: %s", code, out, stderr)
	}
	bodies := srv.Bodies()
	if len(bodies) != 1 || !strings.Contains(bodies[0], `"hello"`) || !strings.Contains(bodies[0], `"model":"ok"`) {
		t.Fatalf("provider got %q", bodies)
	}

	// $CBTH_PROVIDERS wins over the copy next to cbth.
	os.Remove(filepath.Join(real, "cbth-providers"))
	out, _, code = run("CBTH_PROVIDERS=" + helperSrc)
	if code != 0 || out != want {
		t.Fatalf("$CBTH_PROVIDERS: exit %d\n%s", code, out)
	}
	// And PATH is the last resort.
	out, _, code = run("PATH=" + filepath.Dir(helperSrc) + ":/usr/bin:/bin")
	if code != 0 || out != want {
		t.Fatalf("PATH: exit %d\n%s", code, out)
	}
}

// TestInterruptStopsHelper interrupts the runner while the helper waits
// on a provider that never finishes: the run ends with done cancelled and
// exit 1, and the helper process is gone once the runner has exited.
func TestInterruptStopsHelper(t *testing.T) {
	runner, helper := bins(t)
	dir := t.TempDir()
	srv := fakeprovider.Start(fakeprovider.OpenAIChat, secret)
	defer srv.Close()
	root := filepath.Join(dir, "ctx")
	set := tree.Set{Runner: runner, Objects: []object.Object{
		model("openai/slow", "hang", "openai-chat", object.KV{Key: "base_url", Value: srv.BaseURL()}),
	}}
	if err := tree.Materialize(root, set); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "model/openai/slow"), "hello")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "OPENAI_API_KEY=" + secret}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	var lines []string
	for len(lines) < 2 { // start, then the delta that proves the helper is mid-call
		l, err := r.ReadString('\n')
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("read: %v after %q", err, lines)
		}
		lines = append(lines, l)
	}
	if !strings.Contains(lines[1], `"type":"delta"`) {
		t.Fatalf("got %q", lines)
	}
	if !helperRunning(t, helper) {
		t.Fatal("helper is not running mid-call")
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(r)
	err = cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 1 || !strings.HasSuffix(string(rest), `"status":"cancelled"}`+"\n") {
		t.Fatalf("exit %d, rest %q", code, rest)
	}
	if helperRunning(t, helper) {
		t.Fatal("helper still running after the runner exited")
	}
}

// helperRunning reports whether a process of this test's helper binary is
// alive (zombies excluded).
func helperRunning(t *testing.T, path string) bool {
	n, err := proctest.Count(func(args string) bool { return args == path || strings.HasPrefix(args, path+" ") })
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestAgentOnNetworkModels runs an agent object through the kernel's #!
// on each network driver: the real binary, the real cbth-providers helper
// and a fake provider on 127.0.0.1 that answers with a call to fs.read
// (as fs_read, the wire name) and, once the result comes back in its own
// wire shape, with a final answer quoting it. The file lives in the
// agent's root; the run streams the call, the tool's result and the
// answer, and ends ok.
func TestAgentOnNetworkModels(t *testing.T) {
	runner, helper := bins(t)
	cases := []struct{ kind, provider, driver, keyEnv string }{
		{fakeprovider.OpenAIChat, "openai", "openai-chat", "OPENAI_API_KEY"},
		{fakeprovider.OpenAIResponses, "openai", "openai-responses", "OPENAI_API_KEY"},
		{fakeprovider.Anthropic, "anthropic", "anthropic-messages", "ANTHROPIC_API_KEY"},
		{fakeprovider.Gemini, "google", "gemini", "GEMINI_API_KEY"},
	}
	for _, c := range cases {
		t.Run(c.driver, func(t *testing.T) {
			dir := t.TempDir()
			srv := fakeprovider.Start(c.kind, secret)
			defer srv.Close()
			proj := filepath.Join(dir, "proj")
			if err := os.MkdirAll(proj, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(proj, "note.txt"), []byte("buy milk"), 0o600); err != nil {
				t.Fatal(err)
			}
			root := filepath.Join(dir, "ctx")
			set := tree.Set{Runner: runner, Objects: []object.Object{
				model(c.provider+"/m", fakeprovider.AgentModel, c.driver, object.KV{Key: "base_url", Value: srv.BaseURL()}),
				{Kind: object.KindAgent, Path: "coder", Meta: object.Meta{ID: "coder", Name: "coder", Type: object.KindAgent},
					Session: object.SessionSocket, Status: "ready", Model: c.provider + "/m", Tools: []string{"fs.read", "shell.exec"}, Root: proj},
			}}
			if err := tree.Materialize(root, set); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(filepath.Join(root, "agent/coder"), "what does the note say?")
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, c.keyEnv + "=" + secret, "CBTH_PROVIDERS=" + helper}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\n%s\nstderr: %s", err, stdout.String(), stderr.String())
			}
			out := stdout.String()
			for _, want := range []string{
				`"type":"tool_call"`, `"name":"fs.read","arguments":{"path":"note.txt"}`,
				`"role":"tool"`, `"text":"buy milk"`,
				`"text":"the note says: buy milk"`, `"status":"ok"}`,
			} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %s:\n%s", want, out)
				}
			}
			if strings.Contains(out+stderr.String(), secret) {
				t.Fatal("secret leaked")
			}
			if n := len(srv.Bodies()); n != 2 {
				t.Fatalf("%d model calls, want 2", n)
			}
		})
	}
}
