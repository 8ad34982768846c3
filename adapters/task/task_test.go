package task

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func spec(t *testing.T, grace time.Duration, argv ...string) Spec {
	t.Helper()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return Spec{Path: path, Argv: argv, Dir: dir, Env: []string{"PATH=" + os.Getenv("PATH")},
		Spool: filepath.Join(dir, "output"), Lock: filepath.Join(dir, "lock"), SpoolMax: 1 << 20, TailMax: 64, Grace: grace}
}

func run(t *testing.T, s Spec) (*Process, Exit) {
	t.Helper()
	p, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	return p, p.Wait()
}

func TestExitStatusAndOutput(t *testing.T) {
	s := spec(t, time.Second, "sh", "-c", "echo hi; echo err >&2; exit 3")
	_, x := run(t, s)
	if x.Code != 3 || x.Signal != "" || x.Killed {
		t.Fatalf("exit = %+v, want status 3", x)
	}
	if got := string(x.Output.Tail); got != "hi\nerr\n" {
		t.Errorf("tail = %q, want stdout then stderr", got)
	}
	b, err := os.ReadFile(s.Spool)
	if err != nil || string(b) != "hi\nerr\n" {
		t.Errorf("spool = %q, %v", b, err)
	}
	if fi, err := os.Stat(s.Spool); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("spool mode: %v %v", fi, err)
	}
	if _, err := os.Stat(s.Lock); !os.IsNotExist(err) {
		t.Errorf("the lock file outlived the task: %v", err)
	}
}

// Output past the spool cap is counted, and the spool rotates: it keeps
// the latest output (between half the cap and the cap), ending where the
// output ended, in one file once the task is done.
func TestSpoolCapAndTail(t *testing.T) {
	s := spec(t, time.Second, "sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done")
	s.SpoolMax, s.TailMax = 1000, 20
	_, x := run(t, s)
	o := x.Output
	if o.Spooled < 500 || o.Spooled > 1000 || !o.Truncated || o.Bytes <= 1000 {
		t.Fatalf("output = %+v, want between 500 and 1000 spooled of more", o)
	}
	if !strings.HasSuffix(string(o.Tail), "line1999\n") || len(o.Tail) != 20 || !o.TailTruncated {
		t.Errorf("tail = %q", o.Tail)
	}
	b, _ := os.ReadFile(s.Spool)
	if int64(len(b)) != o.Spooled || !bytes.HasSuffix(b, []byte("line1998\nline1999\n")) {
		t.Errorf("spool holds %d bytes ending %q", len(b), b[max(0, len(b)-12):])
	}
	if _, err := os.Stat(s.Spool + ".1"); err == nil {
		t.Error("the older segment is left beside the merged spool")
	}
}

func TestCaptureRotatesAcrossWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spool")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	c := &capture{path: path, spool: f, segMax: 4, tailMax: 5}
	for _, w := range []string{"ab", "cdef", "g", "hijklmn", "o"} {
		c.Write([]byte(w))
	}
	o := c.close()
	if string(o.Tail) != "klmno" || o.Bytes != 15 || o.Spooled != 7 || !o.Truncated {
		t.Errorf("output = %+v (tail %q)", o, o.Tail)
	}
	b, _ := os.ReadFile(path)
	if string(b) != "ijklmno" {
		t.Errorf("spool = %q", b)
	}
}

func TestStopSendsTERM(t *testing.T) {
	p, err := Start(spec(t, 10*time.Second, "sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	p.Stop()
	x := p.Wait()
	if x.Signal != "TERM" || x.Killed || x.Code != -1 {
		t.Errorf("exit = %+v, want ended by TERM", x)
	}
}

// A group that ignores TERM is killed after the grace period.
func TestStopKillsAfterGrace(t *testing.T) {
	p, err := Start(spec(t, 100*time.Millisecond, "sh", "-c", "trap '' TERM; echo ready; sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, p, "ready")
	p.Stop()
	x := p.Wait()
	if x.Signal != "KILL" || !x.Killed {
		t.Errorf("exit = %+v, want KILL after the grace", x)
	}
}

// Processes left in the group after the leader exits do not hold the
// task open: they are stopped after the grace period.
func TestLeftoversAreStopped(t *testing.T) {
	s := spec(t, 100*time.Millisecond, "sh", "-c", "sleep 60 & echo started")
	p, x := run(t, s)
	if x.Code != 0 || string(x.Output.Tail) != "started\n" {
		t.Fatalf("exit = %+v %q", x, x.Output.Tail)
	}
	// The killed sleep is reaped by whoever adopted it, a moment later.
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(-p.PID(), 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the background sleep still runs in the task's group")
		}
	}
}

// Reap finds a task whose lock is held, kills its group and reports it;
// a free lock means nothing was left.
func TestReap(t *testing.T) {
	s := spec(t, 5*time.Second, "sleep", "60")
	p, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	if g := p.Group(); g.PID != p.PID() || g.Start == "" {
		t.Fatalf("group identity = %+v", g)
	}
	r, err := Reap(s.Lock, p.Group(), 5*time.Second)
	if err != nil || !r.Left || !r.Signalled || r.Unverified != "" {
		t.Fatalf("Reap = %+v, %v; want the running task found and signalled", r, err)
	}
	if x := p.Wait(); x.Signal != "TERM" {
		t.Errorf("exit = %+v, want TERM from Reap", x)
	}
	if r, err := Reap(s.Lock, p.Group(), time.Second); r.Left || err != nil {
		t.Errorf("Reap of a finished task = %+v, %v", r, err)
	}
}

// A group whose leader is not the recorded process (another start time,
// or none recorded) is never signalled, and Reap says why.
func TestReapRefusesAnUnverifiedGroup(t *testing.T) {
	s := spec(t, 5*time.Second, "sleep", "60")
	p, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.Stop(); p.Wait() }()
	for _, g := range []Group{{PID: p.PID()}, {PID: p.PID(), Start: p.Group().Start + "1"}} {
		r, err := Reap(s.Lock, g, time.Second)
		if err != nil || !r.Left || r.Signalled || r.Unverified == "" {
			t.Errorf("Reap(%+v) = %+v, %v; want it left alone with the reason", g, r, err)
		}
	}
	if err := syscall.Kill(p.PID(), 0); err != nil {
		t.Errorf("the task was signalled: %v", err)
	}
}

func TestStartFailureLeavesNothing(t *testing.T) {
	s := spec(t, time.Second, "sh")
	s.Path = filepath.Join(t.TempDir(), "missing")
	if _, err := Start(s); err == nil {
		t.Fatal("started a missing program")
	}
	for _, f := range []string{s.Spool, s.Lock} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", f, err)
		}
	}
}

func TestTailText(t *testing.T) {
	for in, want := range map[string]string{
		"abc":              "abc",
		"\x80\x80xyz":      "xyz", // cut inside a character
		"ok\xffnot utf8":   "ok\uFFFDnot utf8",
		"\xa9 caf\xc3\xa9": " café", // a continuation byte first
	} {
		if got := TailText([]byte(in)); got != want {
			t.Errorf("TailText(%q) = %q, want %q", in, got, want)
		}
	}
}

func waitOutput(t *testing.T, p *Process, s string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(p.spec.Spool); strings.Contains(string(b), s) {
			return
		}
	}
	t.Fatalf("the task never printed %q", s)
}
