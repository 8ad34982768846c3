package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Every tool refuses what it cannot do with its stable code, before it
// touches anything: missing or mistyped arguments, what is not a regular
// file, an answer over the cap, the root itself as a file, a root-less
// or daemon-less environment.
func TestToolRefusals(t *testing.T) {
	r, root, _ := sandbox(t)
	os.WriteFile(filepath.Join(root, "work", "big"), make([]byte, 200), 0o600)
	if err := syscall.Mkfifo(filepath.Join(root, "work", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := Env{Root: r, RootDir: root, Cwd: "/work", MaxOutput: 100}
	for _, c := range []struct {
		name, tool, args string
		env              *Env
		code             errs.Code
	}{
		{"read without a path", FSRead, `{}`, nil, errs.EINVAL},
		{"read with a number for a path", FSRead, `{"path":5}`, nil, errs.EINVAL},
		{"read a directory", FSRead, `{"path":"sub"}`, nil, errs.EINVAL},
		{"read a FIFO", FSRead, `{"path":"fifo"}`, nil, errs.EINVAL},
		{"read over the cap", FSRead, `{"path":"big"}`, nil, errs.EFBIG},
		{"read what is not there", FSRead, `{"path":"nope"}`, nil, errs.ENOENT},
		{"list what is not there", FSList, `{"path":"nope"}`, nil, errs.ENOENT},
		{"write without content", FSWrite, `{"path":"x"}`, nil, errs.EINVAL},
		{"write the root", FSWrite, `{"path":"/","content":""}`, nil, errs.EINVAL},
		{"write over a FIFO", FSWrite, `{"path":"fifo","content":"x"}`, nil, errs.EINVAL},
		{"search without a pattern", FSSearch, `{}`, nil, errs.EINVAL},
		{"a shell without a command", ShellExec, `{"command":"  "}`, nil, errs.EINVAL},
		{"arguments that are no object", FSList, `"path"`, nil, errs.EINVAL},
		{"a file tool without a root", FSList, `{}`, &Env{}, errs.ENOTCONF},
		{"a job without a summary", JobSubmit, `{"target":"debug","thread_id":"T"}`, &Env{Jobs: &fakeJobs{}}, errs.EINVAL},
		{"a job outside a session without a thread", JobSubmit, `{"summary":"s"}`, &Env{Jobs: &fakeJobs{}}, errs.EINVAL},
		{"a job with no daemon", JobSubmit, `{"summary":"s","target":"debug","thread_id":"T"}`, &Env{}, errs.ENOTCONF},
	} {
		e := env
		if c.env != nil {
			e = *c.env
		}
		if out, err := Run(context.Background(), e, c.tool, json.RawMessage(c.args)); errs.CodeOf(err) != c.code {
			t.Errorf("%s: %q, %v; want %s", c.name, out, err, c.code)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "work", "x")); err == nil {
		t.Errorf("a refused write left %v", fi.Name())
	}
}

// Answers stay within their bounds: a listing stops at the cap, a search
// at MaxMatches, each entry whole on its line.
func TestAnswersAreBounded(t *testing.T) {
	r, root, _ := sandbox(t)
	dir := filepath.Join(root, "many")
	os.Mkdir(dir, 0o700)
	var lines []string
	for i := range MaxMatches + 50 {
		lines = append(lines, fmt.Sprintf("needle %d", i))
	}
	os.WriteFile(filepath.Join(dir, "hay"), []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	for i := range 40 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("file-%02d", i)), nil, 0o600)
	}
	env := Env{Root: r, RootDir: root, Cwd: "/many"}
	out, err := Run(context.Background(), env, FSSearch, json.RawMessage(`{"pattern":"needle"}`))
	if err != nil || strings.Count(out, "\n") != MaxMatches {
		t.Fatalf("search: %d lines, %v; want %d", strings.Count(out, "\n"), err, MaxMatches)
	}
	env.MaxOutput = 50
	out, err = Run(context.Background(), env, FSList, json.RawMessage(`{}`))
	if err != nil || len(out) > 50 || !strings.HasSuffix(out, "\n") || strings.Count(out, "\n") == 0 {
		t.Fatalf("a capped listing: %q, %v", out, err)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "file-") && l != "hay" {
			t.Fatalf("a cut entry %q in %q", l, out)
		}
	}
	if out, err := Run(context.Background(), env, FSWrite, json.RawMessage(`{"path":"note","content":"abc"}`)); err != nil || !strings.Contains(out, "wrote 3 bytes to /many/note") {
		t.Fatalf("write: %q %v", out, err)
	}
	if out, err := Run(context.Background(), env, FSWrite, json.RawMessage(`{"path":"note","content":"z"}`)); err != nil || !strings.Contains(out, "1 byte") {
		t.Fatalf("a shorter rewrite: %q %v", out, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "note")); string(b) != "z" {
		t.Fatalf("a rewrite leaves %q, want it truncated", b)
	}
}
