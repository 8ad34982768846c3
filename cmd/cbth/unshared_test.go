package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Files another user could rewrite are refused before cbth runs them or
// trusts what they say, each refusal naming the path and its owner or
// mode: a Codex executable (--codex-binary), the cbth a service would
// run, and a rollout for the relay scanner, at bind and while it reads.
// (The auto-replacement of an idle older daemon: see
// TestUpgrade_SharedBinaryDoesNotReplace.)
func TestSharedExecutablesAndRolloutsAreRefused(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.validate()
	dir := t.TempDir()
	file := func(name, body string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	// Files of another owner can be made only by root: elsewhere those
	// cases are left out.
	type refusal struct{ path, says string }
	foreign := func(cases []refusal, name, body string) []refusal {
		t.Helper()
		if os.Getuid() != 0 {
			return cases
		}
		p := file(name, body, 0o755)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		return append(cases, refusal{p, "uid 65534"})
	}

	// --codex-binary another user could rewrite is refused through the
	// binary, nothing appended (every way it can be so is adapters/home's
	// TestCheckUnshared and pluginmod's TestCheckCodexBinary).
	const codex = "#!/bin/sh\nexit 0\n"
	head := h.head()
	for _, c := range foreign([]refusal{
		{file("codex-group", codex, 0o775), "mode 0775"},
	}, "codex-foreign", codex) {
		f := h.fails(time.Minute, "plugin", "enqueue", "--plugin-id", "plug", "--thread-id", "T", "--idempotency-key", "k",
			"--codex-binary", c.path, "--task-kind", "ci", "--summary", "s")
		f.want(t, "EACCES", 13, c.path, c.says)
	}
	if h.head() != head {
		t.Fatalf("refused enqueues appended %d events", h.head()-head)
	}
	// A private executable passes the same check.
	h.ok(nil, "plugin", "enqueue", "--plugin-id", "plug", "--thread-id", "T", "--idempotency-key", "k",
		"--codex-binary", file("codex-ok", codex, 0o755), "--task-kind", "ci", "--summary", "s")

	// service install: the unit would run a cbth its group can rewrite.
	b, err := os.ReadFile(cbthBin)
	if err != nil {
		t.Fatal(err)
	}
	exe := file("cbth", string(b), 0o775)
	cfg, ctl := t.TempDir(), fakeCtl(t)
	cmd := exec.Command(exe, "service", "install", "--json")
	cmd.Env = append(os.Environ(), append(h.env, "XDG_CONFIG_HOME="+cfg, "CBTH_SERVICE_CTL="+ctl.path)...)
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 13 || !strings.Contains(string(out), `"EACCES"`) ||
		!strings.Contains(string(out), exe) || !strings.Contains(string(out), "mode 0775") {
		t.Fatalf("service install of a shared cbth: %v %s", err, out)
	}
	units, _ := filepath.Glob(filepath.Join(cfg, "systemd", "user", "*"))
	if _, err := os.Stat(ctl.log); len(units) != 0 || !os.IsNotExist(err) {
		t.Fatalf("a refused install wrote %v and ran %q", units, ctl.calls(t))
	}

	// relay scanner bind: refused for a rollout its group can write or
	// another user owns; a bound one that becomes writable by others
	// degrades the scanner, which doctor reports.
	const meta = "{\"type\":\"session_meta\"}\n"
	for _, c := range foreign([]refusal{{file("rollout-group.jsonl", meta, 0o660), "mode 0660"}}, "rollout-foreign.jsonl", meta) {
		h.fails(time.Minute, "desktop", "relay", "scanner", "bind", "--bridge-thread-id", bridge, "--rollout-path", c.path).
			want(t, "EACCES", 13, c.path, c.says)
	}
	rollout := file("rollout.jsonl", meta, 0o600)
	h.ok(nil, "desktop", "relay", "scanner", "bind", "--bridge-thread-id", bridge, "--rollout-path", rollout)
	if err := os.Chmod(rollout, 0o666); err != nil {
		t.Fatal(err)
	}
	h.preflight()
	if v := h.scanner(); v.State != "degraded" || v.Reason != "rollout_not_private" {
		t.Fatalf("a rollout made writable by others: %+v", v)
	}
	rep, dr := h.doctor()
	if f := rep.get("desktop.relay"); dr.code != 1 || f.State != "fail" || !strings.Contains(f.Detail, "rollout_not_private") ||
		!strings.Contains(f.Detail, "mode 0666") {
		t.Fatalf("doctor: exit %d %+v", dr.code, f)
	}
}
