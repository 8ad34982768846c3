package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

// Hardening through the real binary (issue 18): a damaged log is never
// silently replaced or served, hostile files and homes are refused, a
// daemon that cannot start says why, and inputs are taken as given or
// refused.

// failure is a command's JSON error.
type failure struct {
	Code    string
	Message string
	Exit    int
	Stderr  string
}

// fails runs a command that must fail and returns its error. A command
// that hangs fails the test after limit.
func (h *homeDir) fails(limit time.Duration, args ...string) failure {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c := exec.CommandContext(ctx, cbthBin, append(args, "--json")...)
	c.Env = append(os.Environ(), h.env...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	if ctx.Err() != nil {
		h.t.Fatalf("cbth %v did not finish within %s", args, limit)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		h.t.Fatalf("cbth %v succeeded (%v); want a failure\nstdout: %s", args, err, out.String())
	}
	f := failure{Exit: ee.ExitCode(), Stderr: errb.String()}
	var doc struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		h.t.Fatalf("cbth %v: stdout is not one JSON error: %v\n%s", args, err, out.String())
	}
	f.Code, f.Message = doc.Error.Code, doc.Error.Message
	if strings.Contains(f.Stderr, "goroutine ") || strings.Contains(f.Stderr, "panic:") {
		h.t.Fatalf("cbth %v printed a Go panic:\n%s", args, f.Stderr)
	}
	return f
}

func (f failure) want(t *testing.T, code string, exit int, words ...string) {
	t.Helper()
	if f.Code != code || f.Exit != exit {
		t.Fatalf("got %s exit %d (%s); want %s exit %d", f.Code, f.Exit, f.Message, code, exit)
	}
	for _, w := range words {
		if !strings.Contains(f.Message, w) {
			t.Fatalf("the message %q does not say %q", f.Message, w)
		}
	}
}

func (h *homeDir) stop() {
	h.t.Helper()
	h.ok(nil, "daemon", "stop")
	waitFor(h.t, "the daemon to exit", 10*time.Second, func() bool { return h.pid() == 0 })
}

func (h *homeDir) db() string { return filepath.Join(h.root, "cbth.db") }

// verifyReport runs events verify --json with no daemon and checks that
// stdout is exactly one JSON document, a report.
func (h *homeDir) verifyReport() (problems []string, exit int) {
	h.t.Helper()
	r := h.run("events", "verify", "--json")
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	var rep struct {
		Problems []struct{ Message string } `json:"problems"`
	}
	if err := dec.Decode(&rep); err != nil {
		h.t.Fatalf("events verify --json: %v\n%s", err, r.stdout)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err != io.EOF {
		h.t.Fatalf("events verify --json printed more than one JSON document:\n%s", r.stdout)
	}
	if strings.Contains(r.stderr, "goroutine ") {
		h.t.Fatalf("events verify printed a Go panic:\n%s", r.stderr)
	}
	for _, p := range rep.Problems {
		problems = append(problems, p.Message)
	}
	return problems, r.code
}

// Item 1: a missing or emptied log is refused, never replaced by an empty
// one, while the rest of the home is still there.
func TestLostLogIsRefusedNotReplaced(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"deleted", "emptied"} {
		t.Run(how, func(t *testing.T) {
			h := newHome(t)
			h.submit("t")
			h.submit("t")
			h.stop()
			h.damaged = true
			if how == "deleted" {
				os.Remove(h.db())
			} else {
				os.Truncate(h.db(), 0)
			}
			h.fails(20*time.Second, "job", "list").want(t, "ECORRUPT", 70, h.db(), "home reinit", "backup")
			fi, err := os.Stat(h.db())
			if (how == "deleted" && err == nil) || (how == "emptied" && (err != nil || fi.Size() != 0)) {
				t.Fatalf("the log was replaced: %v %v", fi, err)
			}
			if probs, exit := h.verifyReport(); exit != 70 || len(probs) == 0 {
				t.Fatalf("events verify: exit %d, problems %q", exit, probs)
			}
			// The way out: move the home aside and start a new one.
			var res struct {
				MovedTo string `json:"moved_to"`
			}
			h.ok(&res, "home", "reinit")
			if _, err := os.Stat(filepath.Join(res.MovedTo, "cbth.db.ack")); err != nil {
				t.Fatalf("the old home was not kept: %v", err)
			}
			h.submit("t")
		})
	}
}

// Item 1: a log that lost its last records is refused: by the
// acknowledged head when it is there, by the projections being ahead when
// it is not. The old daemon rebuilt the projections from the shorter log,
// and then even verify passed.
func TestShortenedLogIsRefused(t *testing.T) {
	t.Parallel()
	for _, withAck := range []bool{true, false} {
		t.Run(fmt.Sprintf("ack=%v", withAck), func(t *testing.T) {
			h := newHome(t)
			for i := 0; i < 4; i++ {
				h.submit("t")
			}
			h.stop()
			h.damaged = true
			enginetest.DeleteTail(t, h.db(), 2)
			word := "acknowledged"
			if !withAck {
				os.Remove(h.db() + ".ack")
				word = "projections"
			}
			h.fails(20*time.Second, "job", "list").want(t, "ECORRUPT", 70, word, "home reinit")
			if probs, exit := h.verifyReport(); exit != 70 || len(probs) == 0 {
				t.Fatalf("events verify after the refusal: exit %d, problems %q", exit, probs)
			}
		})
	}
}

// Item 3: corrupting the newest bbolt meta page makes bbolt open the
// transaction before it; the acknowledged head catches the lost commit.
func TestRolledBackCommitIsRefused(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.submit("t")
	h.submit("t")
	h.stop()
	h.damaged = true
	enginetest.CorruptNewestMeta(t, h.db())
	h.fails(20*time.Second, "job", "list").want(t, "ECORRUPT", 70, "acknowledged", "cbth.db.ack")
	if probs, exit := h.verifyReport(); exit != 70 || !strings.Contains(strings.Join(probs, "\n"), "acknowledged") {
		t.Fatalf("events verify: exit %d, problems %q", exit, probs)
	}
}

// Item 2: faults that made bbolt panic give a clear error with a stable
// code, the daemon refuses to serve, and verify reports a problem list.
func TestDamagedLogGivesAnErrorNotAPanic(t *testing.T) {
	t.Parallel()
	base := newHome(t)
	if _, failures := submitLoad(base, 8, 40, nil); failures != 0 {
		t.Fatalf("%d submits failed", failures)
	}
	base.stop()
	pristine, err := os.ReadFile(base.db())
	if err != nil {
		t.Fatal(err)
	}
	ack, _ := os.ReadFile(base.db() + ".ack")
	pageSize, branch := enginetest.LogBranchPage(t, base.db())
	for _, fault := range enginetest.PageFaults {
		t.Run(fault.Name, func(t *testing.T) {
			h := newHome(t)
			h.damaged = true
			os.MkdirAll(h.root, 0o700)
			os.WriteFile(h.db(), fault.Damage(bytes.Clone(pristine), pageSize, branch), 0o600)
			os.WriteFile(h.db()+".ack", ack, 0o600)
			if fault.AtOpen {
				h.fails(20*time.Second, "job", "list").want(t, "ECORRUPT", 70, h.db())
			} else {
				// Open does not read every page: the daemon serves
				// until a read reaches the damaged one. That read is
				// ECORRUPT, and the daemon then stops serving.
				h.status()
				h.fails(20*time.Second, "events", "export").want(t, "ECORRUPT", 70, h.db())
				waitFor(t, "the daemon to stop serving the damaged log", 10*time.Second, func() bool { return h.pid() == 0 })
			}
			if h.pid() != 0 {
				t.Fatal("a daemon serves the damaged log")
			}
			// The daemon's last line is written after it lets the lock go.
			var log []byte
			waitFor(t, "daemon.log to say why the daemon stopped", 10*time.Second, func() bool {
				log, _ = os.ReadFile(filepath.Join(h.root, "log", "daemon.log"))
				return strings.Contains(string(log), "ECORRUPT")
			})
			if probs, exit := h.verifyReport(); exit != 70 || len(probs) == 0 {
				t.Fatalf("events verify: exit %d, problems %q", exit, probs)
			}
			// Export reads only the log's own pages: it may still get
			// them out (that is how a damaged home is recovered), but it
			// never panics.
			if r := h.run("events", "export"); strings.Contains(r.stderr, "goroutine ") {
				t.Fatalf("events export: exit %d\n%s", r.code, r.stderr)
			}
		})
	}
}

// Item 4: a FIFO as the result file or /dev/zero as the metadata file is
// refused at once; neither hangs the command or blocks daemon stop.
func TestHostileFilesAreRefused(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	id := h.submit("t")
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	h.fails(15*time.Second, "job", "complete", "--job-id", id, "--summary", "x", "--result-file", fifo).want(t, "EINVAL", 2, "not a regular file")
	h.fails(15*time.Second, "job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "k", "--summary", "s",
		"--metadata-file", "/dev/zero").want(t, "EINVAL", 2, "not a regular file")
	big := filepath.Join(t.TempDir(), "big.json")
	os.WriteFile(big, []byte(`{"pad":"`+strings.Repeat("x", 300<<10)+`"}`), 0o600)
	h.fails(15*time.Second, "job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "k", "--summary", "s",
		"--metadata-file", big).want(t, "EFBIG", 2, "limit")
	h.ok(nil, "job", "complete", "--job-id", id, "--summary", "x")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stop := exec.CommandContext(ctx, cbthBin, "daemon", "stop")
	stop.Env = append(os.Environ(), h.env...)
	if out, err := stop.CombinedOutput(); err != nil {
		t.Fatalf("daemon stop: %v\n%s", err, out)
	}
}

// Item 5: a home reached through a symbolic link another user planted is
// refused before cbth changes anything behind it; run/, the lock and the
// socket may not be links at all; a regular file at the socket path is an
// error, not something to delete.
func TestHostileHomeLinksAreRefused(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to own a link as uid 65534")
	}
	mine := filepath.Join(t.TempDir(), "mine")
	os.Mkdir(mine, 0o755)
	link := filepath.Join(t.TempDir(), "planted")
	if err := os.Symlink(mine, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	h := newHome(t)
	h.env = append(h.env, "CBTH_HOME="+link)
	h.fails(20*time.Second, "job", "list").want(t, "EACCES", 13, link, "symbolic link")
	if fi, _ := os.Stat(mine); fi.Mode().Perm() != 0o755 {
		t.Fatalf("cbth changed the mode behind the link to %v", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(mine); len(ents) != 0 {
		t.Fatalf("cbth wrote behind the link: %v", ents)
	}

	// Links the user owns are followed, except where clients look by path.
	for _, c := range []struct{ name, path string }{
		{"run", "run"}, {"lock", "run/daemon.lock"}, {"socket", "run/cbth.sock"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHome(t)
			os.MkdirAll(filepath.Join(h.root, "run"), 0o700)
			target := filepath.Join(t.TempDir(), "elsewhere")
			if c.name == "run" {
				os.Remove(filepath.Join(h.root, "run"))
				os.Mkdir(target, 0o700)
			}
			if err := os.Symlink(target, filepath.Join(h.root, c.path)); err != nil {
				t.Fatal(err)
			}
			h.fails(20*time.Second, "job", "list").want(t, "EACCES", 13, filepath.Join(h.root, c.path))
		})
	}
	t.Run("regular file at the socket", func(t *testing.T) {
		h := newHome(t)
		sock := filepath.Join(h.root, "run", "cbth.sock")
		os.MkdirAll(filepath.Dir(sock), 0o700)
		os.WriteFile(sock, []byte("keep me"), 0o600)
		h.fails(20*time.Second, "job", "list").want(t, "EEXIST", 1, sock)
		if b, _ := os.ReadFile(sock); string(b) != "keep me" {
			t.Fatal("the file at the socket path was removed")
		}
	})
}

// Item 6: a daemon that cannot start says why, at once, to the command
// that started it.
func TestDaemonStartFailureIsReported(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, config string
		code         string
		exit         int
		words        []string
	}{
		{"bad TOML", "[delivery]\nsweep_interval = \"soon\"\n", "EINVAL", 2, []string{"config.toml:2:", "sweep_interval"}},
		{"zero sweep interval", "[delivery]\nsweep_interval = \"0s\"\n", "EINVAL", 2, []string{"config.toml", "sweep_interval must be positive"}},
		{"zero redelivery window", "[delivery]\nredelivery_window = \"0s\"\n", "EINVAL", 2, []string{"redelivery_window"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A start timeout the fix does not need and the old wait
			// (10 s, then EHOSTDOWN) cannot meet with the right code.
			h := newHome(t, "CBTH_START_TIMEOUT=5s")
			os.MkdirAll(h.root, 0o700)
			os.WriteFile(filepath.Join(h.root, "config.toml"), []byte(c.config), 0o600)
			h.fails(20*time.Second, "job", "list").want(t, c.code, c.exit, c.words...)
			log, _ := os.ReadFile(filepath.Join(h.root, "log", "daemon.log"))
			if !strings.Contains(string(log), c.words[len(c.words)-1]) {
				t.Fatalf("daemon.log does not record the reason:\n%s", log)
			}
		})
	}
	t.Run("directory at the socket path", func(t *testing.T) {
		h := newHome(t, "CBTH_START_TIMEOUT=5s")
		os.MkdirAll(filepath.Join(h.root, "run", "cbth.sock"), 0o700)
		h.fails(20*time.Second, "job", "list").want(t, "EEXIST", 1, "cbth.sock", "directory")
	})
}

// Item 6: a socket file removed under a running daemon does not brick the
// home: the daemon listens again and the next command reaches it; daemon
// stop reaches it even before that.
func TestRemovedSocketDoesNotBrickTheHome(t *testing.T) {
	t.Parallel()
	h := newHome(t, "CBTH_START_TIMEOUT=8s")
	h.submit("t")
	pid := h.pid()
	os.Remove(filepath.Join(h.root, "run", "cbth.sock"))
	h.submit("t")
	if h.pid() != pid {
		t.Fatalf("another daemon (%d) serves; want the first (%d)", h.pid(), pid)
	}
	// The gateway's socket is kept the same way: a channel client finds
	// the gateway by its path only.
	os.Remove(filepath.Join(h.root, "run", "gateway.sock"))
	waitFor(t, "the gateway socket back", 15*time.Second, func() bool {
		_, err := os.Lstat(filepath.Join(h.root, "run", "gateway.sock"))
		return err == nil
	})
	// No route: the gateway itself answers, refusing the routing key.
	if got := h.gwSend(2, "--stream-id", "s", "--seq", "1", "--session-id", "x", "--text", "hi"); len(got) == 0 || last(got).ReasonCode != "routing_key" {
		t.Fatalf("gateway send through the new socket: %+v", got)
	}

	// With a 1 h tick the daemon does not notice: daemon stop signals it.
	slow := newHome(t)
	os.MkdirAll(slow.root, 0o700)
	os.WriteFile(filepath.Join(slow.root, "config.toml"), []byte("idle_timeout = \"4h\"\n[delivery]\nsweep_interval = \"1h\"\nobservation_window = \"5h\"\n"), 0o600)
	slow.submit("t")
	os.Remove(filepath.Join(slow.root, "run", "cbth.sock"))
	var res struct {
		Outcome string `json:"outcome"`
		PID     int    `json:"pid"`
	}
	slow.ok(&res, "daemon", "stop")
	if res.Outcome != "stopped" || slow.pid() != 0 {
		t.Fatalf("daemon stop: %+v; the daemon still runs: %d", res, slow.pid())
	}
}

// Item 8: invalid UTF-8 is refused, never rewritten, before anything is
// sent; a raw frame with it is refused by the daemon.
func TestInvalidUTF8IsRefused(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.submit("a\uFFFDb") // a real U+FFFD is text like any other
	head := h.status().LogHeadSeq
	h.fails(15*time.Second, "job", "submit", "--target", "cli", "--thread-id", "a\xffb", "--task-kind", "k", "--summary", "s").
		want(t, "EINVAL", 2, "not valid UTF-8")
	h.fails(15*time.Second, "job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "k", "--summary", "caf\xe9").
		want(t, "EINVAL", 2, "not valid UTF-8")
	if got := h.status().LogHeadSeq; got != head {
		t.Fatalf("the log moved from %d to %d", head, got)
	}
	c, err := net.Dial("unix", filepath.Join(h.root, "run", "cbth.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame := `{"proto":1,"id":1,"op":"job.submit","args":{"target":"cli","thread_id":"a` + "\xff" + `b","task_kind":"k","summary":"s"}}` + "\n"
	c.Write([]byte(frame))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.Contains(line, `"EINVAL"`) || !strings.Contains(line, "UTF-8") {
		t.Fatalf("raw frame with invalid UTF-8: %s", line)
	}
	if got := h.status().LogHeadSeq; got != head {
		t.Fatalf("the log moved from %d to %d", head, got)
	}
}

// Item 8: a job complete retried after its first try committed (its
// answer lost) answers with the committed outcome and appends nothing.
func TestCompleteRetryIsIdempotent(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	id := h.submit("t")
	result := filepath.Join(t.TempDir(), "r.json")
	os.WriteFile(result, []byte(`{"ok":true}`), 0o600)
	h.ok(nil, "job", "complete", "--job-id", id, "--summary", "green", "--result-file", result)
	head := h.status().LogHeadSeq
	arts, _ := os.ReadDir(filepath.Join(h.root, "artifacts"))
	var again struct {
		Outcome string `json:"outcome"`
		Status  string `json:"status"`
	}
	h.ok(&again, "job", "complete", "--job-id", id, "--summary", "green", "--result-file", result)
	if again.Outcome != "already_completed" || again.Status != "ready" {
		t.Fatalf("retry: %+v", again)
	}
	if got := h.status().LogHeadSeq; got != head {
		t.Fatalf("the retry appended: head %d -> %d", head, got)
	}
	if after, _ := os.ReadDir(filepath.Join(h.root, "artifacts")); len(after) != len(arts) {
		t.Fatalf("the retry stored a copy: %d entries, want %d", len(after), len(arts))
	}
	// A different completion is still refused.
	h.fails(15*time.Second, "job", "complete", "--job-id", id, "--summary", "red").want(t, "ESTATE", 1)
	os.WriteFile(result, []byte(`{"ok":false}`), 0o600)
	h.fails(15*time.Second, "job", "complete", "--job-id", id, "--summary", "green", "--result-file", result).want(t, "ESTATE", 1)
	failed := h.submit("t")
	h.ok(nil, "job", "fail", "--job-id", failed, "--reason", "lost")
	h.ok(&again, "job", "fail", "--job-id", failed, "--reason", "lost")
	if again.Outcome != "already_failed" {
		t.Fatalf("fail retry: %+v", again)
	}
}

// Item 8: error codes say what happened.
func TestErrorCodesSayWhatHappened(t *testing.T) {
	t.Parallel()
	t.Run("home of another uid is EACCES", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root to make a home owned by uid 65534")
		}
		h := newHome(t)
		os.MkdirAll(h.root, 0o700)
		os.Chown(h.root, 65534, 65534)
		h.fails(15*time.Second, "job", "list").want(t, "EACCES", 13, "uid 65534")
	})
	t.Run("a file that is not a log is ECORRUPT, not EBUSY", func(t *testing.T) {
		h := newHome(t)
		h.damaged = true
		os.MkdirAll(h.root, 0o700)
		os.WriteFile(h.db(), bytes.Repeat([]byte("not a bbolt file "), 1024), 0o600)
		r := h.run("events", "export", "--json")
		if r.code != 70 || !strings.Contains(r.stdout, "ECORRUPT") {
			t.Fatalf("events export of garbage: exit %d %s", r.code, r.stdout)
		}
		if probs, exit := h.verifyReport(); exit != 70 || len(probs) == 0 {
			t.Fatalf("events verify of garbage: exit %d %q", exit, probs)
		}
	})
	t.Run("a full disk is ENOSPC", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root to mount a small tmpfs")
		}
		dir := t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Skipf("mount tmpfs: %v %s", err, out)
		}
		t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
		h := newHome(t)
		h.root = filepath.Join(dir, "home")
		h.env = append(h.env, "CBTH_HOME="+h.root)
		id := h.submit("t")
		big := filepath.Join(t.TempDir(), "big")
		os.WriteFile(big, bytes.Repeat([]byte("x"), 6<<20), 0o600)
		h.fails(15*time.Second, "job", "complete", "--job-id", id, "--summary", "x", "--result-file", big).want(t, "ENOSPC", 69)
		filler, _ := os.Create(filepath.Join(dir, "filler"))
		io.Copy(filler, io.LimitReader(zeros{}, 8<<20)) // fills what is left
		filler.Close()
		var f failure
		for i := 0; i < 200 && f.Code == ""; i++ {
			r := h.run("job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "k", "--summary", strings.Repeat("s", 4000), "--json")
			if r.code != 0 {
				f = h.fails(15*time.Second, "job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "k", "--summary", strings.Repeat("s", 4000))
			}
		}
		f.want(t, "ENOSPC", 69)
		os.Remove(filepath.Join(dir, "filler"))
		h.submit("t") // space again: the log goes on
	})
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }
