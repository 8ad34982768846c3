package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
)

type finding struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

type doctorReport struct {
	OK     bool      `json:"ok"`
	Checks []finding `json:"checks"`
}

func (h *homeDir) doctor() (doctorReport, result) {
	h.t.Helper()
	r := h.run("doctor", "--json")
	var rep doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		h.t.Fatalf("doctor --json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	return rep, r
}

func (rep doctorReport) get(id string) finding {
	for _, f := range rep.Checks {
		if f.ID == id {
			return f
		}
	}
	return finding{}
}

// The checks every report has, in order.
var doctorIDs = []string{"home", "home.permissions", "config", "daemon", "log", "ctx.runner", "confinement", "providers", "credentials", "codex", "codex.mcp", "codex.daemon", "desktop.relay", "desktop.queue"}

func checkIDs(t *testing.T, rep doctorReport) {
	t.Helper()
	var got []string
	for _, f := range rep.Checks {
		got = append(got, f.ID)
	}
	if strings.Join(got, " ") != strings.Join(doctorIDs, " ") {
		t.Errorf("checks %v, want %v", got, doctorIDs)
	}
}

// A fresh home: nothing is wrong, and doctor creates nothing.
func TestDoctorFreshHome(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	rep, r := h.doctor()
	if r.code != 0 || !rep.OK {
		t.Fatalf("fresh home: exit %d\n%s", r.code, r.stdout)
	}
	checkIDs(t, rep)
	for _, f := range rep.Checks {
		if f.State == "fail" {
			t.Errorf("%s failed on a fresh home: %s", f.ID, f.Detail)
		}
	}
	if _, err := os.Stat(h.root); !os.IsNotExist(err) {
		t.Errorf("doctor created the home: %v", err)
	}
}

// A healthy home with a running daemon, a log and an object tree whose
// runner exists.
func TestDoctorHealthyHome(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.ctxInit()
	h.submit("T")
	rep, r := h.doctor()
	if r.code != 0 || !rep.OK {
		t.Fatalf("healthy home: exit %d\n%s", r.code, r.stdout)
	}
	checkIDs(t, rep)
	for id, want := range map[string]string{"home": "ok", "home.permissions": "ok", "daemon": "ok", "log": "ok", "ctx.runner": "ok"} {
		if f := rep.get(id); f.State != want {
			t.Errorf("%s = %+v, want %s", id, f, want)
		}
	}
	if d := rep.get("daemon").Detail; !strings.Contains(d, fmt.Sprintf("protocol %d", ipc.Proto)) {
		t.Errorf("daemon detail %q", d)
	}
	if d := rep.get("log").Detail; !strings.Contains(d, "verify") {
		t.Errorf("log detail %q", d)
	}
}

// A broken home: a wrong mode, a private file opened up, an object tree
// whose runner is gone and the socket of a daemon that died. Each is
// named with its fix, and doctor exits 1.
func TestDoctorBrokenHome(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	runner := h.ctxInit()
	h.submit("T")
	pid := h.pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the daemon to die", 10*time.Second, func() bool { return h.pid() == 0 })
	os.Remove(runner)
	os.Chmod(h.root, 0o755)
	os.Chmod(filepath.Join(h.root, "cbth.db"), 0o644)

	rep, r := h.doctor()
	if r.code != 1 || rep.OK || !strings.Contains(r.stderr, "doctor found") {
		t.Fatalf("broken home: exit %d ok=%v\n%s", r.code, rep.OK, r.stderr)
	}
	checkIDs(t, rep)
	for _, tc := range []struct{ id, detail, fix string }{
		{"home", "mode 0755", "chmod 700 " + h.root},
		{"home.permissions", "cbth.db (0644)", "chmod -R go-rwx " + h.root},
		{"daemon", "socket is left", "cbth daemon restart"},
		{"ctx.runner", runner, "cbth ctx init --runner"},
	} {
		f := rep.get(tc.id)
		if f.State != "fail" || !strings.Contains(f.Detail, tc.detail) || !strings.Contains(f.Fix, tc.fix) {
			t.Errorf("%s = %+v, want fail naming %q with fix %q", tc.id, f, tc.detail, tc.fix)
		}
	}
	// Without --json, every problem and fix is printed for people.
	r = h.run("doctor")
	if r.code != 1 || strings.Count(r.stdout, "FAIL") != 4 || strings.Count(r.stdout, "fix: ") < 4 {
		t.Errorf("doctor for people: exit %d\n%s", r.code, r.stdout)
	}
	// Following the fixes makes the home healthy again.
	os.Chmod(h.root, 0o700)
	os.Chmod(filepath.Join(h.root, "cbth.db"), 0o600)
	h.ok(nil, "daemon", "restart")
	if err := os.Symlink(cbthBin, runner); err != nil {
		t.Fatal(err)
	}
	if rep, r := h.doctor(); r.code != 0 || !rep.OK {
		t.Errorf("after the fixes: exit %d\n%s", r.code, r.stdout)
	}
}

// A network model: without the provider helper it fails (and the
// credentials, which the helper reads, are skipped); with it, a missing
// credential fails with where to put it, and a present one is found and
// never printed.
func TestDoctorProvidersAndCredentials(t *testing.T) {
	t.Parallel()
	helper := providersBin(t)
	h := newHome(t, "CBTH_PROVIDERS=", "OPENAI_API_KEY=")
	h.ctxInit()
	h.ok(nil, "model", "add", "openai/gpt-4o", "--driver", "openai-chat", "--id", "gpt-4o")
	rep, r := h.doctor()
	if f := rep.get("providers"); r.code != 1 || f.State != "fail" || !strings.Contains(f.Fix, "cbth-providers") || !strings.HasPrefix(f.Detail, "1 network model configured") {
		t.Errorf("without the helper: exit %d, providers = %+v", r.code, f)
	}
	if f := rep.get("credentials"); f.State != "skip" {
		t.Errorf("without the helper: credentials = %+v", f)
	}
	h.env = append(h.env, "CBTH_PROVIDERS="+helper)
	rep, r = h.doctor()
	if f := rep.get("credentials.openai"); r.code != 1 || f.State != "fail" || !strings.Contains(f.Detail, "OPENAI_API_KEY") || f.Fix == "" {
		t.Errorf("without a key: exit %d, credentials.openai = %+v", r.code, f)
	}
	const secret = "sk-test-never-printed-7f3a"
	h.env = append(h.env, "OPENAI_API_KEY="+secret)
	rep, r = h.doctor()
	if f := rep.get("credentials.openai"); r.code != 0 || f.State != "ok" || !strings.Contains(f.Detail, "$OPENAI_API_KEY") {
		t.Errorf("with a key: exit %d, credentials.openai = %+v", r.code, f)
	}
	if strings.Contains(r.stdout+r.stderr, secret) || strings.Contains(h.run("doctor").stdout, secret) {
		t.Error("doctor printed the credential")
	}
}

// The Codex CLI: missing is a warning (only the cli target needs it); a
// codex_binary that is not there fails; a working one reports its version.
func TestDoctorCodex(t *testing.T) {
	t.Parallel()
	h := newHome(t, "PATH=/nonexistent")
	rep, _ := h.doctor()
	if f := rep.get("codex"); f.State != "warn" || !strings.Contains(f.Fix, "codex_binary") {
		t.Errorf("no codex on PATH: %+v", f)
	}
	os.MkdirAll(h.root, 0o700)
	cfg := filepath.Join(h.root, "config.toml")
	os.WriteFile(cfg, []byte("codex_binary = \"/nonexistent/codex\"\n"), 0o600)
	// The one problem is counted in the singular.
	if rep, r := h.doctor(); r.code != 1 || rep.get("codex").State != "fail" || !strings.Contains(r.stderr, "doctor found 1 problem\n") {
		t.Errorf("a missing codex_binary: exit %d, %+v\n%s", r.code, rep.get("codex"), r.stderr)
	}
	fake := filepath.Join(t.TempDir(), "codex")
	os.WriteFile(fake, []byte("#!/bin/sh\necho codex-cli 0.169.0\n"), 0o700)
	os.WriteFile(cfg, []byte("codex_binary = \""+fake+"\"\n"), 0o600)
	if rep, r := h.doctor(); r.code != 0 || rep.get("codex").State != "ok" || !strings.Contains(rep.get("codex").Detail, "0.169.0") {
		t.Errorf("a working codex: exit %d, %+v", r.code, rep.get("codex"))
	}
}

// A running daemon looks codex up on its own PATH, the one it started
// with, not on the shell's: doctor reports what the daemon sees, says so,
// and says how to get past a Codex only this shell finds. Daemon status
// carries the daemon's lookup, never its PATH.
func TestDoctorCodexAsTheDaemonSeesIt(t *testing.T) {
	t.Parallel()
	const daemonPath = "/nonexistent-daemon-path"
	h := newHome(t, "PATH="+daemonPath)
	h.ok(nil, "daemon", "restart")
	dir := t.TempDir()
	fake := filepath.Join(dir, "codex")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho codex-cli 0.169.0\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	h.env = append(h.env, "PATH="+dir)

	rep, r := h.doctor()
	if f := rep.get("codex"); r.code != 1 || f.State != "fail" || !strings.Contains(f.Detail, "(as the running daemon sees it)") ||
		!strings.Contains(f.Detail, "this shell finds "+fake) || !strings.Contains(f.Fix, "cbth daemon restart from this shell") ||
		!strings.Contains(f.Fix, `codex_binary = "`+fake+`"`) {
		t.Fatalf("a codex only this shell finds: exit %d, %+v", r.code, f)
	}
	var st struct {
		Codex *struct {
			Binary, Path, Error string
		} `json:"codex"`
	}
	sr := h.run("daemon", "status", "--json")
	if err := json.Unmarshal([]byte(sr.stdout), &st); err != nil || st.Codex == nil || st.Codex.Binary != "codex" || st.Codex.Path != "" ||
		!strings.Contains(st.Codex.Error, "not on the daemon's PATH") || strings.Contains(sr.stdout, daemonPath) {
		t.Fatalf("daemon status: %v\n%s", err, sr.stdout)
	}

	// The fix: a daemon started from this shell finds it.
	h.ok(nil, "daemon", "restart")
	rep, r = h.doctor()
	if f := rep.get("codex"); r.code != 0 || f.State != "ok" || !strings.Contains(f.Detail, "codex 0.169.0 at "+fake+" (as the running daemon sees it)") {
		t.Fatalf("after the restart: exit %d, %+v", r.code, f)
	}
	// No daemon: this shell's view, and it says so.
	h.ok(nil, "daemon", "stop")
	rep, _ = h.doctor()
	if f := rep.get("codex"); f.State != "ok" || !strings.Contains(f.Detail, "at "+fake+" (as this shell finds it; no daemon to ask)") {
		t.Fatalf("without a daemon: %+v", f)
	}
}

// Whether Codex will load cbth's MCP server (spec/mcp.md): absent is a
// warning (cbth cli run adds it to its own sessions); `cbth mcp install`
// makes it ok, says Codex asks before task_run and
// desktop_bridge_preflight, and a second install changes nothing;
// --approve task_run is said; an approval of the default set taken out
// fails; uninstall leaves the user's own settings byte for byte.
func rep0(h *homeDir) doctorReport {
	rep, _ := h.doctor()
	return rep
}

func TestDoctorMCP(t *testing.T) {
	t.Parallel()
	codexHome := filepath.Join(t.TempDir(), "codex")
	h := newHome(t, "CODEX_HOME="+codexHome)
	if rep, _ := h.doctor(); rep.get("codex.mcp").State != "warn" || rep.get("codex.mcp").Fix != "cbth mcp install" {
		t.Fatalf("no entry: %+v", rep.get("codex.mcp"))
	}
	os.MkdirAll(codexHome, 0o700)
	cfg := filepath.Join(codexHome, "config.toml")
	user := "# my settings\nmodel = \"gpt-5.5\" # the one I like\n\n[projects.\"/src\"]\ntrust_level = \"trusted\"\n"
	os.WriteFile(cfg, []byte(user), 0o600)
	var inst struct {
		Changed bool `json:"config_changed"`
	}
	h.ok(&inst, "mcp", "install")
	rep, r := h.doctor()
	if f := rep.get("codex.mcp"); r.code != 0 || f.State != "ok" || !strings.Contains(f.Detail, "approved: desktop_note_arm, ") || !strings.Contains(f.Detail, "job_cancel, job_submit, watch_stop;") ||
		!strings.Contains(f.Detail, "Codex asks before task_run, watch_start, desktop_bridge_preflight") || !inst.Changed {
		t.Fatalf("after install: exit %d %+v", r.code, f)
	}
	h.ok(&inst, "mcp", "install")
	if inst.Changed {
		t.Fatal("a second install changed the file")
	}
	b, _ := os.ReadFile(cfg)
	if !strings.HasPrefix(string(b), user) {
		t.Fatalf("install changed the user's settings:\n%s", b)
	}
	h.ok(nil, "mcp", "install", "--approve", "task_run")
	if f := rep0(h).get("codex.mcp"); f.State != "ok" || !strings.Contains(f.Detail, "task_run is pre-approved") {
		t.Fatalf("with task_run approved: %+v", f)
	}
	b, _ = os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(b), "[mcp_servers.cbth.tools.job_submit]\napproval_mode = \"approve\"\n", "", 1)), 0o600)
	if rep, r := h.doctor(); r.code != 1 || rep.get("codex.mcp").State != "fail" || !strings.Contains(rep.get("codex.mcp").Detail, "job_submit is not approved") {
		t.Fatalf("an approval taken out: exit %d %+v", r.code, rep.get("codex.mcp"))
	}
	h.ok(nil, "mcp", "uninstall")
	if b, _ := os.ReadFile(cfg); string(b) != user {
		t.Fatalf("uninstall left:\n%q\nwant:\n%q", b, user)
	}
	if _, err := os.Stat(filepath.Join(codexHome, "skills", "cbth", "SKILL.md")); err == nil {
		t.Fatal("uninstall left the skill")
	}
}

// A home with an agent and a network model: doctor reads the agent's
// control files like every object's (no "model identity" failure), and
// goes on to ask the provider helper for the model's credential.
func TestDoctorHomeWithAnAgent(t *testing.T) {
	t.Parallel()
	a := newAgentHome(t)
	a.ok(nil, "model", "add", "openai/m", "--driver", "openai-chat", "--id", "m")
	a.env = append(a.env, "CBTH_PROVIDERS="+providersBin(t), "OPENAI_API_KEY=sk-doctor-test")
	rep, r := a.doctor()
	for _, f := range rep.Checks {
		if f.State == "fail" {
			t.Errorf("%s failed: %s", f.ID, f.Detail)
		}
	}
	if f := rep.get("credentials.openai"); f.State != "ok" || !strings.Contains(f.Detail, "OPENAI_API_KEY") || strings.Contains(r.stdout, "sk-doctor-test") {
		t.Errorf("credentials.openai = %+v", f)
	}
	if r.code != 0 || !rep.OK {
		t.Errorf("doctor: exit %d\n%s", r.code, r.stdout)
	}
}
