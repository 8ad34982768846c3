package main_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// The MCP surface hardened (issue 34, spec/mcp.md), through the real
// binary.

// A malformed line, a line that is JSON but no message, and a 16 MiB
// line each get a JSON-RPC error (-32700; -32600; -32600 with EMSGSIZE),
// with the request's id where one is read before the line breaks (null
// otherwise), and `cbth mcp serve` reads on: the next
// call is answered, and the server ends only when its input does.
func TestMCPServe_MalformedLinesDoNotEndTheServer(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	cmd := exec.Command(cbthBin, "mcp", "serve")
	cmd.Env = append(os.Environ(), h.env...)
	cmd.Dir = t.TempDir()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(outPipe)
		sc.Buffer(nil, 8<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				m = map[string]any{"unparsed": sc.Text()}
			}
			lines <- m
		}
		close(lines)
	}()
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(in, s+"\n"); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	next := func(what string) map[string]any {
		t.Helper()
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatalf("%s: the server closed its output (exited: %v)", what, cmd.Wait())
			}
			return m
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer", what)
		}
		return nil
	}
	errOf := func(m map[string]any) (float64, string) {
		e, _ := m["error"].(map[string]any)
		code, _ := e["code"].(float64)
		data, _ := e["data"].(map[string]any)
		s, _ := data["code"].(string)
		return code, s
	}

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"0"}}}`)
	if m := next("initialize"); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"` + "\x01 not json")
	// Its id is read up to where it breaks, so the caller is answered.
	if m := next("a malformed line"); m["id"] != float64(2) {
		t.Fatalf("a malformed line: %v", m)
	} else if code, _ := errOf(m); code != -32700 {
		t.Fatalf("a malformed line: %v, want -32700", m)
	}
	send(`not json at all`)
	if m := next("a line with no id"); m["id"] != nil {
		t.Fatalf("a line with no id: %v", m)
	} else if code, _ := errOf(m); code != -32700 {
		t.Fatalf("a line with no id: %v, want -32700", m)
	}
	send(`{"hello":"world"}`)
	if code, _ := errOf(next("JSON that is not a message")); code != -32600 {
		t.Fatal("JSON that is not a message: want -32600")
	}
	big := fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"job_submit","arguments":{"task_kind":"ci","summary":"%s"}}}`, strings.Repeat("x", 16<<20))
	send(big)
	m := next("a 16 MiB line")
	if code, c := errOf(m); code != -32600 || c != "EMSGSIZE" || m["id"] != float64(3) {
		t.Fatalf("a 16 MiB line: %v, want -32600 EMSGSIZE for id 3", m)
	}

	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"job_list","arguments":{},"_meta":{"threadId":"01a2aaaa-0000-7000-8000-0000000000f1"}}}`)
	m = next("the call after")
	res, _ := m["result"].(map[string]any)
	if m["id"] != float64(4) || res == nil || res["isError"] == true {
		t.Fatalf("the call after the bad lines: %v", m)
	}
	in.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the server ended with %v at the end of its input", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not end with its input")
	}
}

// Idempotency keys of two threads never meet, whatever their ids and
// keys hold: thread "a/b" with key "c" and thread "a" with key "b/c"
// made one key before. A client's own dedupe key cannot enter the MCP
// namespace: EINVAL, nothing appended.
func TestMCPServe_IdempotencyKeysDoNotCollide(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	s := h.mcpSession(t.TempDir())
	first := callTool(t, s, codexMeta("01a2/b0000"), "job_submit", map[string]any{"task_kind": "ci", "summary": "one", "idempotency_key": "c"})
	second := callTool(t, s, codexMeta("01a2"), "job_submit", map[string]any{"task_kind": "ci", "summary": "two", "idempotency_key": "b0000/c"})
	if first.IsError || second.IsError {
		t.Fatalf("submits: %s / %s", first.Text, second.Text)
	}
	if first.Data["job_id"] == second.Data["job_id"] || second.Data["deduplicated"] == true || second.Data["source_thread_id"] != "01a2" {
		t.Fatalf("two threads' keys met: %v / %v", first.Data, second.Data)
	}
	var job struct {
		DedupeKey string `json:"dedupe_key"`
	}
	h.ok(&job, "job", "query", first.Data["job_id"].(string))
	before := len(h.exported())
	r := h.run("job", "submit", "--thread-id", "01a2/b0000", "--task-kind", "ci", "--summary", "forged", "--dedupe-key", job.DedupeKey, "--json")
	if r.code != 2 || !strings.Contains(r.stderr, "EINVAL") || !strings.Contains(r.stderr, "reserved") {
		t.Fatalf("a client key in the MCP namespace: exit %d %s", r.code, r.stderr)
	}
	if n := len(h.exported()); n != before {
		t.Fatalf("the refused submit appended %d events", n-before)
	}
}

// A forged bridge: once a bridge thread is selected, another thread's
// desktop_bridge_preflight is refused (thread_mismatch, naming the
// operator's command) and appends nothing; the real bridge keeps its
// place and its preflights work. The first preflight through MCP still
// selects a bridge where none is, and the operator can move it.
func TestMCPServe_ForgedBridgeIsRefused(t *testing.T) {
	t.Parallel()
	h := desktopHome(t)
	h.validate()
	s := h.mcpSession(t.TempDir())
	const forger = "01a2abab-0000-7000-8000-000000000034"
	if a := callTool(t, s, codexMeta(bridge), "desktop_bridge_preflight", map[string]any{}); a.IsError {
		t.Fatalf("the first preflight through MCP: %s", a.Text)
	}
	before := len(h.exported())
	a := callTool(t, s, codexMeta(forger), "desktop_bridge_preflight", map[string]any{})
	if a.code() != "thread_mismatch" || !strings.Contains(a.Text, "cbth desktop bridge-preflight --bridge-thread-id "+forger) {
		t.Fatalf("a forged preflight: %s", a.Text)
	}
	if n := len(h.exported()); n != before {
		t.Fatalf("the forged preflight appended %d events", n-before)
	}
	if a := callTool(t, s, codexMeta(bridge), "desktop_bridge_preflight", map[string]any{}); a.IsError || a.Data["bridge_thread_id"] != bridge {
		t.Fatalf("the real bridge's preflight after the forgery: %s %v", a.Text, a.Data)
	}
	if a := callTool(t, s, codexMeta(bridge), "desktop_claim_next_ready", map[string]any{}); a.IsError {
		t.Fatalf("the real bridge's claim after the forgery: %s", a.Text)
	}
	// The operator moves it.
	h.ok(nil, "desktop", "bridge-preflight", "--bridge-thread-id", forger)
	if a := callTool(t, s, codexMeta(forger), "desktop_bridge_preflight", map[string]any{}); a.IsError {
		t.Fatalf("the new bridge's preflight: %s", a.Text)
	}
	if a := callTool(t, s, codexMeta(bridge), "desktop_bridge_preflight", map[string]any{}); a.code() != "thread_mismatch" {
		t.Fatalf("the old bridge's preflight after the move: %s", a.Text)
	}
}

// Approval is the user's choice: `cbth mcp install` approves neither
// task_run, watch_start nor desktop_bridge_preflight, and says Codex asks before them
// and how to pre-approve; --approve task_run pre-approves it and says
// what that means; a tool that needs no approval, or does not exist, is
// EINVAL and changes nothing.
func TestMCPInstall_ApprovalIsTheUsersChoice(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	codexHome := filepath.Join(t.TempDir(), "codex")
	cfg := filepath.Join(codexHome, "config.toml")
	approved := func() map[string]bool {
		t.Helper()
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			MCPServers map[string]struct {
				Tools map[string]struct {
					ApprovalMode string `toml:"approval_mode"`
				} `toml:"tools"`
			} `toml:"mcp_servers"`
		}
		if err := toml.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for name, tool := range doc.MCPServers["cbth"].Tools {
			out[name] = tool.ApprovalMode == "approve"
		}
		return out
	}
	r := h.run("mcp", "install", "--codex-home", codexHome)
	if r.code != 0 || !strings.Contains(r.stdout, "Not approved: task_run, watch_start, desktop_bridge_preflight") || !strings.Contains(r.stdout, "--approve task_run,watch_start,desktop_bridge_preflight") {
		t.Fatalf("install: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if a := approved(); a["task_run"] || a["watch_start"] || a["desktop_bridge_preflight"] || !a["job_submit"] || !a["watch_stop"] || !a["desktop_note_arm"] {
		t.Fatalf("approved by default: %v", a)
	}
	var res struct {
		Approved []string `json:"approved_tools"`
		Asks     []string `json:"not_approved_tools"`
		Notes    []string `json:"approval_notes"`
	}
	h.ok(&res, "mcp", "install", "--codex-home", codexHome, "--approve", "task_run")
	if a := approved(); !a["task_run"] || a["desktop_bridge_preflight"] || len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "outside Codex's sandbox") ||
		!slices.Equal(res.Asks, []string{"watch_start", "desktop_bridge_preflight"}) {
		t.Fatalf("--approve task_run: %v %+v", a, res)
	}
	before, _ := os.ReadFile(cfg)
	for _, bad := range []string{"job_list", "rm_rf"} {
		if r := h.run("mcp", "install", "--codex-home", codexHome, "--approve", bad); r.code != 2 || !strings.Contains(r.stderr, "EINVAL") {
			t.Errorf("--approve %s: exit %d %s", bad, r.code, r.stderr)
		}
	}
	if after, _ := os.ReadFile(cfg); string(after) != string(before) {
		t.Fatal("a refused install changed the file")
	}
}

// --command gets the checks `service install` gives the program it
// runs: absolute, no control character, an executable file, and not one
// another user could rewrite. Each refusal writes nothing.
func TestMCPInstall_CommandIsChecked(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	codexHome := filepath.Join(t.TempDir(), "codex")
	shared := filepath.Join(t.TempDir(), "shared")
	os.MkdirAll(shared, 0o700)
	copyFile(t, cbthBin, filepath.Join(shared, "cbth"))
	os.Chmod(shared, 0o777) // a directory anyone can write: the binary in it can be replaced
	writable := filepath.Join(t.TempDir(), "cbth")
	copyFile(t, cbthBin, writable)
	os.Chmod(writable, 0o777)
	notExec := filepath.Join(t.TempDir(), "cbth")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o600)
	for _, c := range []struct {
		name, command string
		exit          int
		code          string
	}{
		{"relative", "bin/cbth", 2, "EINVAL"},
		{"missing", filepath.Join(t.TempDir(), "nothing"), 1, "ENOENT"},
		{"a newline", filepath.Dir(cbthBin) + "/cb\nth", 2, "EINVAL"},
		{"not executable", notExec, 2, "EINVAL"},
		{"writable by others", writable, 13, "EACCES"},
		{"in a directory others can write", filepath.Join(shared, "cbth"), 13, "EACCES"},
	} {
		r := h.run("mcp", "install", "--codex-home", codexHome, "--command", c.command)
		if r.code != c.exit || !strings.Contains(r.stderr, c.code) {
			t.Errorf("%s: exit %d %s, want %d %s", c.name, r.code, r.stderr, c.exit, c.code)
		}
		if _, err := os.Stat(codexHome); err == nil {
			t.Fatalf("%s: the refused install wrote %s", c.name, codexHome)
		}
	}
	if r := h.run("mcp", "install", "--codex-home", codexHome, "--command", cbthBin); r.code != 0 {
		t.Fatalf("a sound --command: exit %d %s", r.code, r.stderr)
	}
}

// A symlinked config.toml (a dotfiles checkout) is written through: the
// link stays and its target gets the entry; uninstall leaves the target
// as it was.
func TestMCPInstall_SymlinkedConfig(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	codexHome := filepath.Join(t.TempDir(), "codex")
	os.MkdirAll(codexHome, 0o700)
	target := filepath.Join(t.TempDir(), "dotfiles", "codex.toml")
	os.MkdirAll(filepath.Dir(target), 0o700)
	user := "model = \"o3\"\nnotes = \"\"\"\n" + "# <<< cbth mcp <<<\n" + "\"\"\"\n"
	os.WriteFile(target, []byte(user), 0o600)
	link := filepath.Join(codexHome, "config.toml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	h.ok(nil, "mcp", "install", "--codex-home", codexHome)
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("config.toml is no longer the link: %v", err)
	}
	if b, _ := os.ReadFile(target); !strings.HasPrefix(string(b), user) || !strings.Contains(string(b), "[mcp_servers.cbth]") {
		t.Fatalf("the target:\n%s", b)
	}
	h.ok(nil, "mcp", "uninstall", "--codex-home", codexHome)
	if b, _ := os.ReadFile(target); string(b) != user {
		t.Fatalf("after uninstall the target is:\n%q\nwant:\n%q", b, user)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o700); err != nil {
		t.Fatal(err)
	}
}

// Trust is given only when asked: `cbth mcp install` writes no trust;
// with --trust own-permissions it writes [cli] trust into cbth's config,
// says what it means, and the daemon started next holds every untrusted
// thread to it (thread trust reports it as the home's); --trust of
// another name is EINVAL and writes nothing.
func TestMCPInstall_TrustOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	codexHome := filepath.Join(t.TempDir(), "codex")
	h.ok(nil, "mcp", "install", "--codex-home", codexHome)
	if b, _ := os.ReadFile(filepath.Join(h.root, "config.toml")); strings.Contains(string(b), "trust") {
		t.Fatalf("install without --trust wrote a trust: %s", b)
	}
	if r := h.run("mcp", "install", "--codex-home", codexHome, "--trust", "everything"); r.code != 2 || !strings.Contains(r.stderr, "EINVAL") {
		t.Fatalf("--trust everything: exit %d %s", r.code, r.stderr)
	}
	var res struct {
		Trust   string `json:"trust"`
		Changed bool   `json:"trust_changed"`
		Note    string `json:"trust_note"`
	}
	h.ok(&res, "mcp", "install", "--codex-home", codexHome, "--trust", "own-permissions")
	if res.Trust != "own_permissions" || !res.Changed || !strings.Contains(res.Note, "its own permissions") {
		t.Fatalf("--trust own-permissions: %+v", res)
	}
	var tr struct {
		Trust  string `json:"trust"`
		Source string `json:"source"`
	}
	h.ok(&tr, "thread", "untrust", "--thread-id", "T")
	if tr.Trust != "own_permissions" || tr.Source != "home" {
		t.Fatalf("the home's trust after install: %+v", tr)
	}
	h.ok(&tr, "thread", "trust", "--thread-id", "T", "--strict")
	if tr.Trust != "strict" || tr.Source != "thread" {
		t.Fatalf("a thread's own trust over the home's: %+v", tr)
	}
}
