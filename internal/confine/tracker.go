package confine

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cbth-dev/cbth/internal/proc"
)

// Tracker remembers the process groups of the confined programs a
// process (the cbth daemon) started, so that it can refuse to act for
// any of their processes: a confined program must not have an
// unconfined one do what it may not. It is the second line behind the
// confinement itself, which already takes unix sockets away (and holds
// where the kernel has the means; see Status).
//
// A confined program leads its own process group (Command sets it).
// A process is taken for one of a tracked program's when it or one of its
// ancestors is in a tracked group: one that left its group and its
// ancestry both (setsid, then its parent exited) is not recognized.
type Tracker struct {
	mu     sync.Mutex
	groups map[int]struct{}
}

// NewTracker returns an empty tracker.
func NewTracker() *Tracker { return &Tracker{groups: map[int]struct{}{}} }

type trackerKey struct{}

// WithTracker returns ctx carrying t: Started records what is started
// under it.
func WithTracker(ctx context.Context, t *Tracker) context.Context {
	return context.WithValue(ctx, trackerKey{}, t)
}

// Started records the process group of cmd, a confined program just
// started, in the tracker ctx carries, if any.
func Started(ctx context.Context, cmd *exec.Cmd) {
	t, _ := ctx.Value(trackerKey{}).(*Tracker)
	if t == nil || cmd.Process == nil {
		return
	}
	t.mu.Lock()
	t.groups[cmd.Process.Pid] = struct{}{}
	t.mu.Unlock()
}

// maxAncestry bounds the walk up a process's ancestors.
const maxAncestry = 64

// Why says why process pid is one of a tracked program's ("" when it is
// not). Groups with no process left are forgotten first: a group id is
// never given to a new group while a process of the old one lives.
func (t *Tracker) Why(pid int) string {
	if t == nil || pid <= 0 {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for g := range t.groups {
		if err := unix.Kill(-g, 0); errors.Is(err, syscall.ESRCH) {
			delete(t.groups, g)
		}
	}
	if len(t.groups) == 0 {
		return ""
	}
	for p, i := pid, 0; p > 1 && i < maxAncestry; i++ {
		if g, err := unix.Getpgid(p); err == nil {
			if _, ok := t.groups[g]; ok {
				if p == pid {
					return fmt.Sprintf("process %d belongs to a program cbth runs confined (process group %d)", pid, g)
				}
				return fmt.Sprintf("process %d descends from a program cbth runs confined (process %d, group %d)", pid, p, g)
			}
		}
		in, ok, err := proc.Parent(p)
		if err != nil || !ok {
			break
		}
		p = in.PPID
	}
	return ""
}
