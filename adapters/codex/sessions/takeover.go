package sessions

import (
	"context"
	"os"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/errs"
	"github.com/cbth-dev/cbth/events"
)

// takeOverGrace is how long an orphaned app-server gets to leave after
// SIGTERM before SIGKILL.
const takeOverGrace = 5 * time.Second

// takeOver stops the app-server an earlier daemon of this home started and
// could not stop (it was killed; its app-server, in a process group of its
// own, lived on). Its stream cannot be proven continuous with anything
// this daemon saw, so it is not adopted: it stops, and the sessions get a
// new epoch on the instance that replaces it. It is recognised by the pid
// the kernel reports listening on this home's private socket, which must
// be one the log recorded for an instance whose daemon is gone; anything
// else answering there is refused (EBUSY).
func (m *Manager) takeOver(ctx context.Context, socket string) error {
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
	ours := false
	err = m.eng.Read(func(r engine.Snapshot) error {
		return r.ForEach(events.KindAppServer, func(st aggregate.State) error {
			a := st.(*aggregate.AppServer)
			if a.PID == peer.PID && a.ExitReason == command.ExitDaemonRestart {
				ours = true
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	if !ours {
		return errs.New(errs.EBUSY, "a codex app-server (pid %d) this home's log does not know listens at %s", peer.PID, socket)
	}
	m.log.Warn("stopping the codex app-server an earlier daemon left running", "pid", peer.PID)
	_ = syscall.Kill(-peer.PID, syscall.SIGTERM)
	if gone(ctx, peer.PID, takeOverGrace) {
		return nil
	}
	_ = syscall.Kill(-peer.PID, syscall.SIGKILL)
	if gone(ctx, peer.PID, takeOverGrace) {
		return nil
	}
	return errs.New(errs.EBUSY, "the codex app-server an earlier daemon left running (pid %d) does not exit", peer.PID)
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
