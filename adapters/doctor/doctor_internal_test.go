package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
)

// env is a doctor environment over a fresh directory: the home (not
// created), an object tree beside it, this user, an empty PATH unless
// given.
func env(t *testing.T, vars ...string) *Env {
	t.Helper()
	dir := t.TempDir()
	m := map[string]string{"PATH": "", "HOME": dir}
	for i := 0; i+1 < len(vars); i += 2 {
		m[vars[i]] = vars[i+1]
	}
	return &Env{Home: home.Home{Root: filepath.Join(dir, "home dir")}, CtxRoot: filepath.Join(dir, "ctx"),
		Getenv:    func(k string) string { return m[k] },
		LookupEnv: func(k string) (string, bool) { v, ok := m[k]; return v, ok },
		Version:   "test", Proto: ipc.Proto, UID: os.Getuid()}
}

// expect checks a check's only finding.
func expect(t *testing.T, name string, fs []Finding, state State, detail, fix string) {
	t.Helper()
	if len(fs) != 1 {
		t.Errorf("%s: %d findings %+v, want 1", name, len(fs), fs)
		return
	}
	f := fs[0]
	if f.State != state || !strings.Contains(f.Detail, detail) || !strings.Contains(f.Fix, fix) {
		t.Errorf("%s: %+v, want %s with %q and fix %q", name, f, state, detail, fix)
	}
	if state != OK && state != Skip && f.Fix == "" {
		t.Errorf("%s: a %s without a fix", name, state)
	}
}

// Run runs the checks in order, names a finding after its check unless it
// names itself, and fails the report only on a failed finding.
func TestRun(t *testing.T) {
	e := env(t)
	checks := []Check{
		{"a", func(context.Context, *Env) []Finding { return one("", OK, "fine", "") }},
		{"b", func(context.Context, *Env) []Finding {
			return []Finding{{ID: "b.one", State: Warn, Detail: "hm", Fix: "do"}, {State: Skip, Detail: "n/a"}}
		}},
		{"c", func(context.Context, *Env) []Finding { return nil }},
	}
	r := Run(context.Background(), e, checks)
	var ids []string
	for _, f := range r.Checks {
		ids = append(ids, f.ID)
	}
	if strings.Join(ids, " ") != "a b.one b" || !r.OK || r.Failed() != 0 || r.Version != "test" || r.Home != e.Home.Root {
		t.Fatalf("report %+v", r)
	}
	checks = append(checks, Check{"d", func(context.Context, *Env) []Finding { return one("", Fail, "broken", "fix it") }})
	if r := Run(context.Background(), e, checks); r.OK || r.Failed() != 1 {
		t.Fatalf("with a failure: ok %v, %d failed", r.OK, r.Failed())
	}
	seen := map[string]bool{}
	for _, c := range Checks() {
		if seen[c.ID] || c.Run == nil {
			t.Errorf("check %q listed twice or without a function", c.ID)
		}
		seen[c.ID] = true
	}
}

// The home: missing is fine (the first command creates it), and doctor
// creates nothing; a file, another user's directory or a wider mode
// fails with the fix, its path quoted for the shell.
func TestCheckHome(t *testing.T) {
	e := env(t)
	expect(t, "missing", checkHome(context.Background(), e), OK, "does not exist yet", "")
	if _, err := os.Stat(e.Home.Root); !os.IsNotExist(err) {
		t.Fatalf("the check created the home: %v", err)
	}
	os.WriteFile(e.Home.Root, nil, 0o600)
	expect(t, "a file", checkHome(context.Background(), e), Fail, "is not a directory", "move it away")
	os.Remove(e.Home.Root)
	os.Mkdir(e.Home.Root, 0o755)
	os.Chmod(e.Home.Root, 0o755)
	expect(t, "mode 0755", checkHome(context.Background(), e), Fail, "mode 0755", "chmod 700 '"+e.Home.Root+"'")
	os.Chmod(e.Home.Root, 0o700)
	expect(t, "private", checkHome(context.Background(), e), OK, "private to you", "")
	other := *e
	other.UID = e.UID + 1
	expect(t, "another user's", checkHome(context.Background(), &other), Fail, fmt.Sprintf("owned by uid %d, not by you (uid %d)", e.UID, other.UID), "CBTH_HOME")
}

// Everything in the home must be this user's and closed to others; the
// list names at most five and counts the rest.
func TestCheckPermissions(t *testing.T) {
	e := env(t)
	expect(t, "no home", checkPermissions(context.Background(), e), Skip, "no home yet", "")
	os.MkdirAll(filepath.Join(e.Home.Root, "run"), 0o700)
	os.WriteFile(filepath.Join(e.Home.Root, "cbth.db"), nil, 0o600)
	expect(t, "private", checkPermissions(context.Background(), e), OK, "2 entries, all yours and private", "")
	for i := range 7 {
		p := filepath.Join(e.Home.Root, fmt.Sprintf("open%d", i))
		os.WriteFile(p, nil, 0o644)
		os.Chmod(p, 0o644)
	}
	expect(t, "open files", checkPermissions(context.Background(), e), Fail, "7 entries open to group or others", "chmod -R go-rwx '"+e.Home.Root+"'")
	if f := checkPermissions(context.Background(), e)[0]; !strings.Contains(f.Detail, "and 2 more") {
		t.Errorf("seven listed whole: %s", f.Detail)
	}
	other := *e
	other.UID = e.UID + 1
	fs := checkPermissions(context.Background(), &other)
	if len(fs) != 2 || fs[0].State != Fail || !strings.Contains(fs[0].Detail, "belonging to another user") || !strings.Contains(fs[0].Fix, "chown") {
		t.Errorf("another user's entries: %+v", fs)
	}
}

// config.toml: absent means the defaults; one that does not load fails.
func TestCheckConfig(t *testing.T) {
	e := env(t)
	expect(t, "absent", checkConfig(context.Background(), e), OK, "built-in defaults", "")
	os.MkdirAll(e.Home.Root, 0o700)
	os.WriteFile(e.Home.Config(), []byte("idle_timeout = \"soon\"\n"), 0o600)
	expect(t, "bad", checkConfig(context.Background(), e), Fail, "", "edit '"+e.Home.Config()+"'")
	os.WriteFile(e.Home.Config(), []byte("idle_timeout = \"5m\"\n"), 0o600)
	expect(t, "good", checkConfig(context.Background(), e), OK, "loads", "")
}

// No daemon is fine; a socket left without one is a daemon that died;
// the log is verified offline when no daemon holds it.
func TestCheckDaemonWithout(t *testing.T) {
	e := env(t)
	expect(t, "no daemon", checkDaemon(context.Background(), e), OK, "not running", "")
	expect(t, "no log", checkLog(context.Background(), e), OK, "no log yet", "")
	expect(t, "no daemon to ask", checkRelay(context.Background(), e), Skip, "no daemon", "")
	os.MkdirAll(e.Home.RunDir(), 0o700)
	os.WriteFile(e.Home.Socket(), nil, 0o600)
	expect(t, "a socket left", checkDaemon(context.Background(), e), Fail, "socket is left", "cbth daemon restart")
}

// The runner: every object's #! line must name an executable; with no
// tree, a runner beside cbth or on PATH is enough.
func TestCheckRunner(t *testing.T) {
	e := env(t)
	expect(t, "nothing", checkRunner(context.Background(), e), Warn, "no object tree yet", "cbth install")
	bin := t.TempDir()
	runner := filepath.Join(bin, "cortexfs-object-runner")
	os.WriteFile(runner, []byte("#!/bin/sh\n"), 0o755)
	e.Executable = filepath.Join(bin, "cbth")
	expect(t, "a runner, no tree", checkRunner(context.Background(), e), OK, "runner "+runner, "")
	for _, obj := range []string{"model/debug/echo", "agent/coder"} {
		p := filepath.Join(e.CtxRoot, obj)
		os.MkdirAll(filepath.Dir(p), 0o700)
		os.WriteFile(p, []byte("#!"+runner+"\n{}\n"), 0o755)
		os.MkdirAll(p+".d", 0o700)
		os.WriteFile(filepath.Join(p+".d", "notes"), []byte("#!/nonexistent/inside/a/control/dir\n"), 0o600)
	}
	expect(t, "a tree", checkRunner(context.Background(), e), OK, "2 objects", "")
	os.Remove(runner)
	expect(t, "the runner gone", checkRunner(context.Background(), e), Fail, "2 of 2; the runners: "+runner, "cbth ctx init --runner")
}

// Confinement: a warning where the system cannot confine, with what to
// do; ok, naming the mechanism, where it can.
// The Codex CLI as this shell finds it: missing is a warning (only the
// cli target needs it), a codex_binary that cannot run fails, a working
// one reports its version. As the daemon sees it: a Codex only this
// shell finds fails with both ways out.
func TestCheckCodex(t *testing.T) {
	bin := t.TempDir()
	codex := filepath.Join(bin, "codex")
	os.WriteFile(codex, []byte("#!/bin/sh\necho codex-cli 0.99.1\n"), 0o755)
	e := env(t)
	expect(t, "not on PATH", checkCodex(context.Background(), e), Warn, "codex is not on PATH (as this shell finds it; no daemon to ask)", "npm install -g @openai/codex")
	e = env(t, "PATH", bin)
	expect(t, "on PATH", checkCodex(context.Background(), e), OK, "codex 0.99.1 at "+codex, "")
	os.MkdirAll(e.Home.Root, 0o700)
	os.WriteFile(e.Home.Config(), []byte("codex_binary = \"/nonexistent/codex\"\n"), 0o600)
	expect(t, "a codex_binary that is not there", checkCodex(context.Background(), e), Fail, "does not exist or is not executable", "fix codex_binary")

	e = env(t, "PATH", bin)
	expect(t, "the daemon finds it", daemonCodex(context.Background(), e, api.CodexLookup{Binary: "codex", Path: codex}), OK, "as the running daemon sees it", "")
	expect(t, "only this shell finds it", daemonCodex(context.Background(), e, api.CodexLookup{Binary: "codex", Error: "not found"}), Fail,
		"not on the daemon's PATH", fmt.Sprintf("codex_binary = %q", codex))
	expect(t, "nobody finds it", daemonCodex(context.Background(), env(t), api.CodexLookup{Binary: "codex", Error: "not found"}), Warn,
		"nor on this shell's", "cbth daemon restart")
	expect(t, "a path the daemon cannot run", daemonCodex(context.Background(), e, api.CodexLookup{Binary: "/opt/codex", Error: "permission denied"}), Fail,
		"codex_binary /opt/codex cannot be run", "then cbth daemon restart")
}

// cbth's MCP server absent from the Codex home is a warning with the fix.
func TestCheckMCPAbsent(t *testing.T) {
	e := env(t)
	codexHome := t.TempDir()
	os.MkdirAll(e.Home.Root, 0o700)
	os.WriteFile(e.Home.Config(), []byte(fmt.Sprintf("codex_home = %q\n", codexHome)), 0o600)
	expect(t, "absent", checkMCP(context.Background(), e), Warn, "will not have cbth's tools", "cbth mcp install")
	os.WriteFile(e.Home.Config(), []byte("idle_timeout = \"soon\"\n"), 0o600)
	expect(t, "no config", checkMCP(context.Background(), e), Skip, "does not load", "")
}

// A path is quoted for the shell only when it must be; a long list names
// five and counts the rest.
func TestQuoteAndList(t *testing.T) {
	for in, want := range map[string]string{
		"/home/me/.cbth": "/home/me/.cbth",
		"/tmp/a b":       "'/tmp/a b'",
		"/tmp/it's":      `'/tmp/it'\''s'`,
		"/tmp/$x":        "'/tmp/$x'",
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %q, want %q", in, got, want)
		}
	}
	if got := list([]string{"a", "b", "c", "d", "e", "f", "g"}); got != "a, b, c, d, e and 2 more" {
		t.Errorf("list: %q", got)
	}
}
