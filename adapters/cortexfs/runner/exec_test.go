package runner_test

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

var update = flag.Bool("update", false, "rewrite golden files")

const secret = "sk-EXEC-SECRET-0a1b2c3d"

// bins are the real binaries, built once per test process into binDir:
// cbth under the runner's name and the cbth-providers helper beside it,
// where the runner looks for it first.
var (
	binDir    string
	binOnce   sync.Once
	binErr    error
	runnerBin string
	helperBin string
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// bins builds (once) and returns the runner and the helper.
func bins(t testing.TB) (runner, helper string) {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "cortexfs-bins-"); binErr != nil {
			return
		}
		runnerBin = filepath.Join(binDir, "bin", "cortexfs-object-runner")
		helperBin = filepath.Join(binDir, "bin", "cbth-providers")
		if binErr = goBuild(runnerBin, "github.com/cbth-dev/cbth/cmd/cbth"); binErr == nil {
			binErr = goBuild(helperBin, "github.com/cbth-dev/cbth/cmd/cbth-providers")
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return runnerBin, helperBin
}

// buildRunner builds the real binary as cortexfs-object-runner into dir,
// with extra build environment (the benchmark builds it static).
func buildRunner(t testing.TB, dir string, extraEnv ...string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin", "cortexfs-object-runner")
	if err := goBuild(bin, "github.com/cbth-dev/cbth/cmd/cbth", extraEnv...); err != nil {
		t.Fatal(err)
	}
	return bin
}

func goBuild(out, pkg string, extraEnv ...string) error {
	// Default build settings, so the packages compiled for this test run
	// are reused from the build cache.
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), extraEnv...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

func model(path, nativeID, driverName string, defaults ...object.KV) object.Object {
	p, m, _ := strings.Cut(path, "/")
	return object.Object{Kind: "model", Path: path,
		Meta:     object.Meta{ID: path, Name: m, Type: "model", OwnedBy: p},
		NativeID: nativeID, Driver: object.Routes{"default": {driverName}},
		Caps: []string{"chat", "stream"}, Defaults: defaults, Session: "none", Status: "ready"}
}

type execCase struct {
	name  string
	args  []string // args[0] is the object, relative to the root
	stdin *string
	env   []string
	dir   string // the working directory (default: the test's)
}

func str(s string) *string { return &s }

var (
	runID  = regexp.MustCompile(`run-[0-9a-f-]{36}`)
	portRe = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)
)

func TestExecThroughKernel(t *testing.T) {
	dir := t.TempDir()
	bin, _ := bins(t)
	root := filepath.Join(dir, "ctx")
	proj := filepath.Join(dir, "proj")
	if err := os.MkdirAll(proj, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(proj, "README.md"), []byte("the readme\n"), 0o600)
	srv := fakeprovider.Start(fakeprovider.OpenAIChat, secret)
	defer srv.Close()
	base := object.KV{Key: "base_url", Value: srv.BaseURL()}

	set := tree.Set{Runner: bin, Objects: []object.Object{
		object.DebugEcho(),
		model("openai/gpt-4o", "ok", "openai-chat", base),
		model("openai/denied", "status-401", "openai-chat", base),
		model("openai/limited", "status-429", "openai-chat", base),
		model("openai/flaky", "midstream", "openai-chat", base),
		model("openai/tooly", "tool", "openai-chat", base),
		model("openai/down", "ok", "openai-chat", object.KV{Key: "base_url", Value: fakeprovider.ClosedURL()}),
		model("debug/nodriver", "x", "no-such-driver"),
		{Kind: "agent", Path: "coder", Meta: object.Meta{ID: "coder", Name: "coder", Type: "agent"}, Session: "none",
			Model: "debug/echo", Tools: []string{"fs.read"}, Root: proj},
		{Kind: "tool", Path: "fs.read", Meta: object.Meta{ID: "fs.read", Name: "fs.read", Type: "tool"}, Session: "none"},
	}, Aliases: []tree.Alias{{Path: tree.AliasMain, Target: "model/debug/echo"}, {Path: "home/1000/model/coder", Target: "model/openai/gpt-4o"}}}
	if err := tree.Materialize(root, set); err != nil {
		t.Fatal(err)
	}
	key := []string{"OPENAI_API_KEY=" + secret}
	// Stand-ins for a broken helper, chosen through $CBTH_PROVIDERS.
	crash := helperScript(t, dir, "crash", `echo '{"type":"delta","text":"Hel"}'; exit 3`)
	killed := helperScript(t, dir, "killed", `kill -KILL $$`)
	garbage := helperScript(t, dir, "garbage", `echo 'this is not JSON'`)
	helperEnv := func(p string) []string { return append([]string{"CBTH_PROVIDERS=" + p}, key...) }
	cases := []execCase{
		// The seed exec examples.
		{name: "echo_argv", args: []string{"model/debug/echo", "hello"}},
		{name: "openai_argv", args: []string{"model/openai/gpt-4o", "hello"}, env: key},
		{name: "openai_stdin_text", args: []string{"model/openai/gpt-4o"}, stdin: str("hello\n"), env: key},
		{name: "openai_stdin_messages", args: []string{"model/openai/gpt-4o"}, stdin: str(`{"messages":[{"role":"user","content":"hello"}]}`), env: key},
		{name: "agent_argv", args: []string{"agent/coder", "fix this project"}},
		{name: "agent_stdin_task", args: []string{"agent/coder"}, stdin: str(`{"task":"fix tests"}`)},
		{name: "tool_argv", args: []string{"tool/fs.read", `{"path":"README.md"}`}, dir: proj},
		{name: "tool_stdin", args: []string{"tool/fs.read"}, stdin: str(`{"path":"README.md"}` + "\n"), dir: proj},
		{name: "agent_tool_call", args: []string{"agent/coder", `!tool fs.read {"path":"README.md"}`}},
		{name: "exit13_tool_outside", args: []string{"tool/fs.read", `{"path":"../ctx/model/debug/echo"}`}, dir: proj},
		// Aliases: readlink decides identity.
		{name: "alias_main", args: []string{"model/main", "hello"}},
		{name: "alias_user", args: []string{"home/1000/model/coder", "hi"}, env: key},
		// Exit codes.
		{name: "exit13_denied", args: []string{"model/openai/denied", "hello"}, env: key},
		{name: "exit69_rate_limited", args: []string{"model/openai/limited", "hello"}, env: key},
		{name: "exit69_unreachable", args: []string{"model/openai/down", "hello"}, env: key},
		{name: "exit69_not_configured", args: []string{"model/openai/gpt-4o", "hello"}},
		{name: "exit69_no_driver", args: []string{"model/debug/nodriver", "hello"}},
		{name: "exit2_bad_json", args: []string{"model/debug/echo"}, stdin: str(`{"messages":`)},
		{name: "exit2_empty_stdin", args: []string{"model/debug/echo"}, stdin: str("")},
		{name: "exit2_bad_role", args: []string{"model/debug/echo"}, stdin: str(`{"messages":[{"role":"wizard","content":"x"}]}`)},
		{name: "exit2_tool_not_object", args: []string{"tool/fs.read", "[1,2]"}},
		{name: "exit2_agent_bad_task", args: []string{"agent/coder"}, stdin: str(`{"task":""}`)},
		// The provider helper fails: an internal error, after start.
		{name: "exit70_helper_crash", args: []string{"model/openai/gpt-4o", "hello"}, env: helperEnv(crash)},
		{name: "exit70_helper_killed", args: []string{"model/openai/gpt-4o", "hello"}, env: helperEnv(killed)},
		{name: "exit70_helper_garbage", args: []string{"model/openai/gpt-4o", "hello"}, env: helperEnv(garbage)},
		{name: "exit69_helper_not_executable", args: []string{"model/openai/gpt-4o", "hello"}, env: helperEnv(filepath.Join(root, "no-such-helper"))},
		// Stream shapes.
		{name: "midstream_error", args: []string{"model/openai/flaky", "hello"}, env: key},
		{name: "tool_call", args: []string{"model/openai/tooly", "weather?"}, env: key},
		{name: "text_mode", args: []string{"model/debug/echo", "--text", "hello", "world"}},
		{name: "text_mode_error", args: []string{"model/openai/denied", "--text", "hello"}, env: key},
		{name: "help", args: []string{"model/debug/echo", "--help"}},
		// The runner's arguments: flags anywhere, `--` before input that
		// starts with '-', and an unknown flag is a bad argument.
		{name: "text_mode_after_input", args: []string{"model/debug/echo", "hello", "--text"}},
		{name: "dash_input_after_double_dash", args: []string{"model/debug/echo", "--", "-5", "--text"}},
		{name: "exit2_unknown_flag", args: []string{"model/debug/echo", "-5"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := runCase(t, root, c)
			if strings.Contains(got, secret) {
				t.Fatalf("secret leaked into output:\n%s", got)
			}
			golden := filepath.Join("testdata", "exec", c.name+".golden")
			norm := strings.ReplaceAll(got, root, "$ROOT")
			norm = runID.ReplaceAllString(norm, "RUN")
			norm = portRe.ReplaceAllString(norm, "127.0.0.1:PORT")
			if *update {
				if err := os.WriteFile(golden, []byte(norm), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if string(want) != norm {
				t.Errorf("golden mismatch %s:\n--- got\n%s\n--- want\n%s", golden, norm, want)
			}
		})
	}
	// Reading an object returns metadata only: no code, no secrets.
	body, err := os.ReadFile(filepath.Join(root, "model/openai/gpt-4o"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(body), "#!"+bin+"\nid=openai/gpt-4o\n") {
		t.Errorf("metadata file:\n%s", body)
	}
	// No secret in any file of the tree.
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
				t.Errorf("secret in %s", p)
			}
		}
		return nil
	})
}

// helperScript writes a shell script that stands in for cbth-providers.
func helperScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name+".sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCase(t *testing.T, root string, c execCase) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, c.args[0]), c.args[1:]...)
	// A bare environment: no credentials unless the case gives them, and no
	// session bus, so the keychain is absent as on a headless box.
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + root}, c.env...)
	cmd.Dir = c.dir
	if c.stdin != nil {
		cmd.Stdin = strings.NewReader(*c.stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	exit := 0
	if ee, ok := err.(*exec.ExitError); ok {
		exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("exec %s: %v", c.args[0], err)
	}
	stdin := ""
	if c.stdin != nil {
		stdin = fmt.Sprintf("echo %q | ", *c.stdin)
	}
	return fmt.Sprintf("$ %s$ROOT/%s %q\nexit: %d\n--- stdout\n%s--- stderr\n%s", stdin, c.args[0], c.args[1:], exit, stdout.String(), stderr.String())
}
