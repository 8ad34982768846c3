package main_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Secrets a task prints are redacted before they reach its spool, so
// neither the live output (`task logs` while it runs), nor the artifact
// the spool becomes, nor any event holds them: the values of the task's
// own secret-named variables, a token-like value of any other variable,
// and the common token shapes whatever their source (a GitHub token, an
// OpenAI key, a bearer header, a URL's password, a PEM private key).
// Paths and ordinary words stay. The spool is private: 0600 in a 0700
// directory.
func TestTaskOutputIsRedactedBeforeTheSpool(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "")
	gate := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{
		"DEPLOY_TOKEN": "tok-9f8e7d6c5b4a",
		"BUILD_REF":    "a1b2c3d4e5f6a7b8c9d0e1f2",
		"gh":           "ghp_" + strings.Repeat("A1b2", 9),
		"sk":           "sk-proj-" + strings.Repeat("Zz9", 10),
		"bearer":       "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLWhlcmU",
		"url":          "hunter2secret",
		"pem":          "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
	}
	h.env = append(h.env, "DEPLOY_TOKEN="+secrets["DEPLOY_TOKEN"], "BUILD_REF="+secrets["BUILD_REF"])
	// The shapes come from a file the task prints, not from its command
	// line: the command is recorded as given (spec/tasks.md).
	printed := filepath.Join(t.TempDir(), "printed")
	os.WriteFile(printed, []byte("gh "+secrets["gh"]+" and "+secrets["sk"]+"\nAuthorization: Bearer "+secrets["bearer"]+
		"\ncloning https://me:"+secrets["url"]+"@git.example.com/r.git\n-----BEGIN PRIVATE KEY-----\n"+secrets["pem"]+"\n-----END PRIVATE KEY-----\n"), 0o600)
	script := `echo "token $DEPLOY_TOKEN ref $BUILD_REF home $HOME"
cat ` + printed + `
echo "all green"
read x < ` + gate + `
echo done`
	run := h.taskRun("T", "sh", "-c", script)
	var live string
	waitFor(t, "the output before the gate", 30*time.Second, func() bool {
		r := h.run("task", "logs", run.TaskID)
		live = r.stdout
		return strings.Contains(live, "all green")
	})
	spool := filepath.Join(h.root, "tasks", run.TaskID, "output")
	if fi, err := os.Stat(spool); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the spool: %v %v", fi, err)
	}
	if di, err := os.Stat(filepath.Dir(spool)); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("the spool's directory: %v %v", di, err)
	}
	raw, _ := os.ReadFile(spool)
	if err := os.WriteFile(gate, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v := h.taskEnd(run.TaskID)
	final := h.run("task", "logs", run.TaskID).stdout
	events := h.run("events", "export").stdout
	for where, text := range map[string]string{"the live logs": live, "the spool": string(raw), "the artifact": final, "the tail": v.OutputTail, "the log": events} {
		for name, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s holds the secret %s", where, name)
			}
		}
	}
	for _, want := range []string{"token <redacted DEPLOY_TOKEN> ref <redacted BUILD_REF> home /", "gh <redacted token> and <redacted token>",
		"Authorization: Bearer <redacted token>\n", "https://me:<redacted>@git.example.com/r.git", "<redacted private key>\nall green"} {
		if !strings.Contains(final, want) {
			t.Errorf("the output lacks %q:\n%s", want, final)
		}
	}
}

// A task inherits stdin (/dev/null), stdout and stderr (one pipe) and
// descriptor 3, its lock (spec/tasks.md), and nothing else: not the
// descriptors the daemon's own starter held, which the daemon drops at
// start, so it holds no pipe of the shell that started it either.
func TestTaskInheritsOnlyItsDescriptors(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// The client that starts the daemon holds the write end as
	// descriptors 3 and 4 and hands them on, as a shell's descriptors
	// are handed on.
	c := exec.Command(cbthBin, "daemon", "status", "--json")
	c.Env = append(os.Environ(), h.env...)
	c.ExtraFiles = []*os.File{w, w}
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("daemon status: %v\n%s", err, out)
	}
	w.Close()
	// Once the client is gone, no one holds the write end: the read end
	// sees its end, although the daemon lives on.
	done := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		_, err := r.Read(b)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read a byte nobody wrote")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon holds a descriptor of the shell that started it")
	}
	run := h.taskRun("T", "sh", "-c", "ls /proc/$$/fd")
	v := h.taskEnd(run.TaskID)
	fds := strings.Fields(v.OutputTail)
	slices.Sort(fds)
	if !slices.Equal(fds, []string{"0", "1", "2", "3"}) {
		t.Fatalf("the task's descriptors: %q", v.OutputTail)
	}
}

// The spool rotates under a follower: `task logs -f` finishes the
// segment it was reading (now SPOOL.1) before the new one, so what it
// prints is the whole output, once, even though the kept spool (the
// artifact) holds only its last part. The task's own writes are paced
// by gates the test opens once the follower printed the line before.
func TestTaskLogsFollowAcrossRotation(t *testing.T) {
	t.Parallel()
	h := taskHome(t, "spool_max = 100")
	dir := t.TempDir()
	var script strings.Builder
	var want strings.Builder
	for i := 1; i <= 5; i++ {
		line := fmt.Sprintf("line-%d-%022d\n", i, i) // 30 bytes: a rotation every other line at most
		want.WriteString(line)
		if i > 1 {
			gate := filepath.Join(dir, fmt.Sprintf("g%d", i))
			if err := syscall.Mkfifo(gate, 0o600); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&script, "read x < %s; ", gate)
		}
		fmt.Fprintf(&script, "printf '%%s' '%s'; ", line)
	}
	run := h.taskRun("T", "sh", "-c", script.String())
	c := h.cmd("task", "logs", "-f", run.TaskID)
	var mu sync.Mutex
	var got bytes.Buffer
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := out.Read(buf)
			mu.Lock()
			got.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	printed := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(got.String(), s)
	}
	for i := 1; i <= 5; i++ {
		waitFor(t, fmt.Sprintf("the follower to print line %d", i), 30*time.Second, func() bool { return printed(fmt.Sprintf("line-%d-", i)) })
		if i < 5 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("g%d", i+1)), []byte("go\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	<-copied
	if got.String() != want.String() {
		t.Fatalf("followed %q\nwant %q", got.String(), want.String())
	}
	v := h.taskEnd(run.TaskID)
	if v.SpoolBytes > 100 || !v.SpoolTruncated || v.OutputBytes != 150 {
		t.Fatalf("the task: %+v", v)
	}
}
