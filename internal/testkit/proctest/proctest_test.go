package proctest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSleeper is the child of TestCountAndRSS, and a no-op otherwise.
func TestSleeper(t *testing.T) {
	if os.Getenv("PROCTEST_SLEEPER") == "1" {
		time.Sleep(time.Minute)
	}
}

// A child started here is counted while it runs and not after it is
// reaped, however long its command line; its RSS is a positive number.
func TestCountAndRSS(t *testing.T) {
	tag := "proctest-" + strings.Repeat("x", 300)
	child := exec.Command(os.Args[0], "-test.run=^TestSleeper$", tag)
	child.Env = append(os.Environ(), "PROCTEST_SLEEPER=1")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	mine := func(args string) bool { return strings.HasSuffix(args, " "+tag) }
	if n, err := Count(mine); err != nil || n != 1 {
		t.Fatalf("running child: %d, %v; want 1", n, err)
	}
	if pids, err := Find(mine); err != nil || len(pids) != 1 || pids[0] != child.Process.Pid {
		t.Fatalf("Find: %v, %v; want [%d]", pids, err, child.Process.Pid)
	}
	if kib, err := RSSKiB(child.Process.Pid); err != nil || kib <= 0 {
		t.Fatalf("RSS %d, %v", kib, err)
	}
	child.Process.Kill()
	child.Wait()
	if n, err := Count(mine); err != nil || n != 0 {
		t.Fatalf("reaped child: %d, %v; want 0", n, err)
	}
	if pids, err := Find(mine); err != nil || len(pids) != 0 {
		t.Fatalf("Find after reaping: %v, %v", pids, err)
	}
}

// A child in a group of its own is listed in it while it runs, and the
// group is empty once it is reaped.
func TestInGroup(t *testing.T) {
	child := exec.Command(os.Args[0], "-test.run=^TestSleeper$")
	child.Env = append(os.Environ(), "PROCTEST_SLEEPER=1")
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	pid := child.Process.Pid
	if live, err := InGroup(pid); err != nil || len(live) != 1 || !strings.HasPrefix(live[0], strconv.Itoa(pid)+" ") {
		t.Fatalf("running child's group: %q, %v", live, err)
	}
	child.Process.Kill()
	child.Wait()
	if live, err := InGroup(pid); err != nil || len(live) != 0 {
		t.Fatalf("reaped child's group: %q, %v", live, err)
	}
}
