package proc_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/cbth-dev/cbth/internal/proc"
)

// A process is named by its pid and start time: this one is alive under
// its own start, not under another; an ended one is not, even under the
// start it had; its parent and uid are the kernel's.
func TestStartAliveParent(t *testing.T) {
	me := os.Getpid()
	start, ok, err := proc.Start(me)
	if err != nil || !ok || start == "" {
		t.Fatalf("Start(self): %q %v %v", start, ok, err)
	}
	if !proc.Alive(me, start) || proc.Alive(me, start+"0") || proc.Alive(me, "") {
		t.Fatal("Alive does not hold to the start time")
	}
	in, ok, err := proc.Parent(me)
	if err != nil || !ok || in.PPID != os.Getppid() || in.UID != os.Getuid() {
		t.Fatalf("Parent(self): %+v %v %v", in, ok, err)
	}
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	child, _, _ := proc.Start(c.Process.Pid)
	if in, ok, _ := proc.Parent(c.Process.Pid); !ok || in.PPID != me {
		t.Fatalf("the child's parent: %+v", in)
	}
	c.Process.Kill()
	c.Wait()
	if proc.Alive(c.Process.Pid, child) {
		t.Fatal("an ended process is alive")
	}
	if _, ok, err := proc.Start(c.Process.Pid); ok || err != nil {
		t.Fatalf("Start of an ended process: %v %v", ok, err)
	}
	if _, ok, err := proc.Parent(c.Process.Pid); ok || err != nil {
		t.Fatalf("Parent of an ended process: %v %v", ok, err)
	}
}
