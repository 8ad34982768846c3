package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/tool"
	"github.com/cbth-dev/cbth/internal/errs"
)

// An agent added to the tree is an object with its model, tools, root,
// cwd and delivery in its control files, the built-in tools beside it;
// listed with its defaults filled in; replaced by adding it again;
// removed, its files go and a second removal is ENOENT. What it names
// must exist: its model in the tree, its tools built in.
func TestAgentLifecycle(t *testing.T) {
	env := testEnv(t)
	if _, err := run(t, env, "ctx", "init"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, env, "agent", "add", "coder", "--model", "debug/echo", "--tool", tool.FSRead, "--tool", tool.ShellExec,
		"--cwd", "/src", "--trusted-all", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var info AgentInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Path != "agent/coder" || info.Model != "debug/echo" || !info.TrustedAll ||
		info.Cwd != "/src" || info.Root != filepath.Join(env.CtxRoot, "home", "1000", "agent", "coder", "root") {
		t.Fatalf("added: %s (%v)", out, err)
	}
	d := filepath.Join(env.CtxRoot, "agent", "coder.d")
	for file, want := range map[string]string{"model": "debug/echo\n", "tools": "fs.read\nshell.exec\n", "cwd": "/src\n", "delivery": "trusted_all\n"} {
		if b, _ := os.ReadFile(filepath.Join(d, file)); string(b) != want {
			t.Errorf("%s = %q, want %q", file, b, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(env.CtxRoot, "agent", "coder")); err != nil || !strings.HasPrefix(string(b), "#!"+env.Runner) {
		t.Errorf("the agent's executable: %q %v", b, err)
	}
	for _, s := range tool.Builtins() {
		if _, err := os.Stat(filepath.Join(env.CtxRoot, "tool", s.Name)); err != nil {
			t.Errorf("built-in tool %s not in the tree: %v", s.Name, err)
		}
	}
	if _, err := run(t, env, "agent", "add", "coder", "--model", "debug/echo"); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, env, "agent", "list", "--json")
	var rows []AgentInfo
	if err != nil || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || len(rows[0].Tools) != 0 || rows[0].Cwd != "/" || rows[0].TrustedAll {
		t.Fatalf("after the replacement: %s (%v)", out, err)
	}
	for _, c := range []struct {
		name string
		args []string
		code errs.Code
	}{
		{"a model not in the tree", []string{"agent", "add", "x", "--model", "openai/none"}, errs.ENOENT},
		{"a tool not built in", []string{"agent", "add", "x", "--model", "debug/echo", "--tool", "fs.delete"}, errs.ENOENT},
		{"a name with a slash", []string{"agent", "add", "a/b", "--model", "debug/echo"}, errs.EINVAL},
		{"a relative cwd", []string{"agent", "add", "x", "--model", "debug/echo", "--cwd", "src"}, errs.EINVAL},
	} {
		if _, err := run(t, env, c.args...); errs.CodeOf(err) != c.code {
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	if _, err := os.Stat(filepath.Join(env.CtxRoot, "agent", "x")); !os.IsNotExist(err) {
		t.Errorf("a refused agent is in the tree: %v", err)
	}
	if _, err := run(t, env, "agent", "rm", "coder"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(env.CtxRoot, "agent", "coder")); !os.IsNotExist(err) {
		t.Errorf("a removed agent's file: %v", err)
	}
	if _, err := run(t, env, "agent", "rm", "coder"); errs.CodeOf(err) != errs.ENOENT {
		t.Errorf("removing it again: %v", err)
	}
}
