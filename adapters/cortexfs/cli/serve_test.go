package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A bare tree's model socket (ServeModel, sessions as plain files) over
// its real socket: session files are replaced through a temp file of
// their own, so a stray "<name>.tmp" in the session directory (the
// fixed temp name of a crashed or concurrent writer) neither stops the
// session nor is taken for the file.
func TestServedSessionFilesNeverShareATempName(t *testing.T) {
	env := testEnv(t)
	env.UID = os.Getuid() // the socket serves its own user only
	if _, err := run(t, env, "ctx", "init"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, env, "model", "add", "local/chat", "--driver", "debug", "--id", "echo", "--session", "socket"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(env.CtxRoot, "home", strconv.Itoa(env.UID), "model", "local", "chat.d", "session", "fg")
	for _, name := range []string{"state.tmp", "updated_at.tmp", "latest.md.tmp", "created_at.tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeModel(ctx, env.CtxRoot, "local/chat", env.UID, env.Stderr, time.Now) }()
	defer func() { cancel(); <-served }()
	sock := filepath.Join(env.CtxRoot, "model", "local", "chat.sock")
	var c net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if c, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the socket never answered: %v", err)
		}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte(`{"op":"send","id":"m1","session":"fg","input":"kept whole"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var f struct{ Type, Status string }
		json.Unmarshal(line, &f)
		if f.Type == "done" {
			if f.Status != "ok" {
				t.Fatalf("done: %s", line)
			}
			break
		}
		if f.Type == "error" {
			t.Fatalf("error: %s", line)
		}
	}
	for name, want := range map[string]string{"state": "idle\n", "latest.md": "kept whole"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
}
