package sessions

import (
	"context"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/internal/errs"
)

// takeOverGrace is how long an orphaned app-server gets to leave after
// SIGTERM before SIGKILL.
const takeOverGrace = 5 * time.Second

// takeOver stops the app-server an earlier daemon of this home started and
// could not stop (it was killed; its app-server, in a process group of its
// own, lived on). Its stream cannot be proven continuous with anything
// this daemon saw, so it is not adopted: it stops, and the sessions get a
// new epoch on the instance that replaces it. It is recognised by the
// process the kernel reports listening on this home's private socket,
// which must serve for a pid the log recorded for an instance whose daemon
// is gone: that pid itself, or a process of its group or tree (a codex
// wrapper serves through a child; supervisor.ServesFor). Anything else
// answering there is refused (EBUSY).
func (s *Shared) takeOver(ctx context.Context, socket string) error {
	if _, err := os.Lstat(socket); err != nil {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	t, peer, err := appserver.DialUnix(dctx, socket)
	if err != nil {
		if errs.CodeOf(err) == errs.EACCES {
			return err
		}
		return nil // nobody answers: Codex replaces a stale socket itself
	}
	t.Close()
	orphans, err := s.book.Orphans()
	if err != nil {
		return err
	}
	// The nearest recorded pid is the orphan: the log keeps the pids of
	// every instance ever orphaned, and an old one may since name some
	// unrelated ancestor.
	owners := supervisor.Owners(peer.PID)
	i := slices.IndexFunc(owners, func(pid int) bool { return orphans[pid] })
	if i < 0 {
		return errs.New(errs.EBUSY, "a codex app-server (pid %d) this home's log does not know listens at %s", peer.PID, socket)
	}
	started := owners[i]
	s.log.Warn("stopping the codex app-server an earlier daemon left running", "pid", started, "served_by_pid", peer.PID)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		_ = syscall.Kill(-started, sig)
		if pg, err := syscall.Getpgid(peer.PID); err == nil && pg != started {
			_ = syscall.Kill(peer.PID, sig) // a descendant that left the group
		}
		if gone(ctx, peer.PID, takeOverGrace) && gone(ctx, started, takeOverGrace) {
			return nil
		}
	}
	return errs.New(errs.EBUSY, "the codex app-server an earlier daemon left running (pid %d, served by pid %d) does not exit", started, peer.PID)
}

// gone waits until pid has exited (exited, per OS). The orphan is not
// this process's child: its new parent reaps it.
func gone(ctx context.Context, pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if exited(pid) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return false
}
