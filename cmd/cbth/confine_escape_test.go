package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/confine"
)

// The review's confinement escape (issue 34): an agent's shell.exec,
// confined to its root, runs a cbth client of its own against the
// daemon's socket and asks for a task.run that writes outside the root.
// Pathname unix sockets are no Landlock right before ABI 9, so the
// connect went through and the daemon ran the task unconfined. Now the
// confined program can make no unix socket (seccomp): the client fails
// with the sandbox's EPERM, no task is made and nothing is written
// outside the root, whether the agent runs under the user's own ctx
// runner or on its socket, served by the daemon (which would also
// refuse the connection: TestDaemonRefusesWhatItConfined).
func TestAgentShellExecCannotReachTheDaemon(t *testing.T) {
	t.Parallel()
	if !unixSocketsConfined() {
		t.Fatalf("this machine cannot confine unix sockets (%s): the escape cannot be shown closed", confine.Check().Summary())
	}
	a := newAgentHome(t)
	outside := t.TempDir()
	copyFile(t, cbthBin, filepath.Join(a.proj, "cbth"))
	for _, via := range []string{"runner", "socket"} {
		escaped := filepath.Join(outside, "escaped-"+via)
		command := fmt.Sprintf(`CBTH_HOME=%s ./cbth task run --target debug --thread-id escape -- sh -c 'echo pwned > %s'; echo "exit=$?"`, a.root, escaped)
		args, _ := json.Marshal(map[string]string{"command": command})
		input := "!tool shell.exec " + string(args)
		var output string
		switch via {
		case "runner":
			c := exec.Command(filepath.Join(a.ctx, "agent", "coder"), input)
			c.Dir, c.Env = a.proj, append(os.Environ(), a.env...)
			var stdout, stderr bytes.Buffer
			c.Stdout, c.Stderr = &stdout, &stderr
			if err := c.Run(); err != nil {
				t.Fatalf("%v\n%s", err, stderr.String())
			}
			output = toolOutput(t, stdout.Bytes())
		case "socket":
			req, _ := json.Marshal(map[string]string{"op": "send", "id": "esc1", "session": "escape", "input": input})
			s := dialSock(t, a.sock())
			for _, m := range ofType(s.do(string(req)), "message") {
				if m["role"] == "tool" {
					var res struct {
						Output string `json:"output"`
					}
					json.Unmarshal([]byte(text(m)), &res)
					output = res.Output
				}
			}
		}
		if !strings.Contains(output, "ESANDBOX") || !strings.Contains(output, "exit=69") {
			t.Errorf("%s: the confined client's output: %q", via, output)
		}
		if _, err := os.Stat(escaped); err == nil {
			t.Errorf("%s: the task ran and wrote outside the root", via)
		}
	}
	var tasks []any
	a.ok(&tasks, "task", "list")
	if len(tasks) != 0 {
		t.Fatalf("the confined client made tasks: %v", tasks)
	}
}

// toolOutput is the output of the last shell.exec result in an agent's
// JSONL.
func toolOutput(t *testing.T, b []byte) string {
	t.Helper()
	var res struct {
		Output string `json:"output"`
	}
	for _, m := range ofType(frames(t, b), "message") {
		if m["role"] == "tool" {
			json.Unmarshal([]byte(text(m)), &res)
		}
	}
	return res.Output
}

func unixSocketsConfined() bool {
	for _, r := range confine.Check().Rights {
		if r.Name == confine.RightUnixSockets {
			return r.Confined
		}
	}
	return false
}

// What is confined is said where the user decides: doctor's confinement
// finding names each right and what keeps it (or why nothing does), and
// `agent add` of an agent with shell.exec says it on stderr, with what
// is never confined, at the moment the root is given.
func TestConfinementIsSaid(t *testing.T) {
	t.Parallel()
	a := newAgentHome(t)
	root := t.TempDir()
	r := a.run("agent", "add", "runner", "--model", "debug/echo", "--tool", "shell.exec", "--root", root)
	st := confine.Check()
	if r.code != 0 || !strings.Contains(r.stderr, "shell.exec of agent/runner runs as you in "+root) || !strings.Contains(r.stderr, st.Summary()) ||
		!strings.Contains(r.stderr, "never confined: the network") {
		t.Fatalf("agent add: exit %d, stderr %q", r.code, r.stderr)
	}
	if len(st.Unconfined()) > 0 && !strings.Contains(r.stderr, "WARNING") {
		t.Fatalf("agent add where rights are not confined: %q", r.stderr)
	}
	if r := a.run("agent", "add", "reader", "--model", "debug/echo", "--tool", "fs.read", "--root", root); strings.Contains(r.stderr, "shell.exec") {
		t.Fatalf("agent add without shell.exec: %q", r.stderr)
	}
	rep, _ := a.doctor()
	f := rep.get("confinement")
	for _, right := range st.Rights {
		if !strings.Contains(f.Detail, right.Name+" ("+right.How+")") {
			t.Errorf("doctor's confinement finding lacks %s: %+v", right.Name, f)
		}
	}
	if unixSocketsConfined() && !strings.Contains(f.Detail, "unix sockets (seccomp)") {
		t.Errorf("doctor does not say what keeps unix sockets: %+v", f)
	}
	a.confined()
}
