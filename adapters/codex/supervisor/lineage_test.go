package supervisor_test

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
)

// sleeper starts a sleep with attr, killed and reaped when the test ends.
func sleeper(t *testing.T, attr *syscall.SysProcAttr) int {
	t.Helper()
	c := exec.Command("sleep", "300")
	c.SysProcAttr = attr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Process.Kill()
		c.Wait()
	})
	return c.Process.Pid
}

// A socket's server serves for the process started when it is that
// process, a member of its process group, or a descendant, however deep;
// for no other process, and for nobody once it is gone.
func TestServesFor(t *testing.T) {
	leader := sleeper(t, &syscall.SysProcAttr{Setpgid: true})
	// A member of leader's group that is not its descendant: the test's
	// own child, put in that group.
	member := sleeper(t, &syscall.SysProcAttr{Setpgid: true, Pgid: leader})
	stranger := sleeper(t, &syscall.SysProcAttr{Setpgid: true})
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	self, parent := os.Getpid(), os.Getppid()
	for _, c := range []struct {
		name           string
		started, serve int
		want           bool
	}{
		{"the started process", leader, leader, true},
		{"a member of its group", leader, member, true},
		{"its child, in a group of its own", self, stranger, true},
		{"its grandchild, in a group of its own", parent, stranger, true},
		{"an unrelated process", leader, stranger, false},
		{"another group's leader", stranger, member, false},
		{"an ancestor", leader, self, false},
		{"a process that is gone", self, gone.Process.Pid, false},
		{"no started process", 0, leader, false},
		{"init as the started process", 1, leader, false},
	} {
		if got := supervisor.ServesFor(c.started, c.serve); got != c.want {
			t.Errorf("%s: ServesFor(%d, %d) = %v, want %v", c.name, c.started, c.serve, got, c.want)
		}
	}
	// Owners lists the nearest first: the process, its group, its parent.
	if o := supervisor.Owners(member); len(o) < 3 || o[0] != member || o[1] != leader || o[2] != self {
		t.Errorf("Owners(%d) = %v, want [%d %d %d ...]", member, o, member, leader, self)
	}
}
