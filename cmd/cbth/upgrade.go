package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
	"golang.org/x/mod/semver"
)

// Upgrades. A client and a daemon of different protocols refuse each
// other (EVERSION); since protocol 3 a daemon still answers ping,
// daemon.status and daemon.handover to any client. A client that meets
// an older daemon replaces it when it is idle (no task, no delivery in
// flight, no attached client); otherwise it names the command that does:
// `cbth daemon restart`, which hands over without losing work.

// restartHint is the command every version error names.
const restartHint = "run `cbth daemon restart` to replace it with this one (running tasks finish first; no job, batch or delivery is lost)"

// olderThan reports whether daemon version v is older than this client.
func olderThan(v string) bool {
	a, b := "v"+strings.TrimPrefix(v, "v"), "v"+strings.TrimPrefix(Version, "v")
	return semver.IsValid(a) && semver.IsValid(b) && semver.Compare(a, b) < 0
}

// versionError explains a refused request: which daemon runs, which
// client this is, and what to run.
func versionError(daemonVersion string, daemonProto int) error {
	if daemonProto > ipc.Proto {
		return errs.New(errs.EVERSION, "the running daemon is a newer cbth (%s, protocol %d) than this one (%s, protocol %d): use the newer cbth binary, or %s",
			daemonVersion, daemonProto, Version, ipc.Proto, restartHint)
	}
	return errs.New(errs.EVERSION, "the running daemon is cbth %s (protocol %d) and cannot serve this cbth %s (protocol %d): %s",
		daemonVersion, daemonProto, Version, ipc.Proto, restartHint)
}

// idleForHandover reports whether replacing the daemon now could not
// interrupt anything: no task, no delivery in flight, no attached client.
func idleForHandover(st api.Status) bool {
	return st.RunningTasks == 0 && st.QueuedTasks == 0 && st.Deliveries == 0 && st.AttachedClients == 0 && !st.HandingOver
}

// replaceIfIdleOlder replaces the home's daemon with this binary's when
// the daemon is older and idle, and reports whether it did. It asks
// through the operations every daemon since protocol 3 answers to any
// client; an older daemon that does not is left alone.
func (e *Env) replaceIfIdleOlder(daemonVersion string, daemonProto int) bool {
	if daemonProto > ipc.Proto || (daemonProto == ipc.Proto && !olderThan(daemonVersion)) {
		return false
	}
	h, err := e.Home()
	if err != nil {
		return false
	}
	c, err := ipc.Dial(h.Socket(), Version)
	if err != nil {
		return false
	}
	st, err := api.DaemonStatus.Call(c, api.Empty{})
	c.Close()
	if err != nil || !idleForHandover(st) {
		return false
	}
	// The daemon that replaces it runs this binary: not one another
	// user could have rewritten.
	exe, err := os.Executable()
	if err == nil {
		err = home.CheckUnshared("this cbth", exe, true)
	}
	if err != nil {
		fmt.Fprintf(e.Stderr, "cbth: not replacing the idle daemon (cbth %s) with this binary: %v\n", daemonVersion, err)
		return false
	}
	if _, err := e.handOver(h, 0, false); err != nil {
		return false
	}
	fmt.Fprintf(e.Stderr, "cbth: replaced the idle daemon (cbth %s, protocol %d) with this version (%s, protocol %d)\n",
		daemonVersion, daemonProto, Version, ipc.Proto)
	return true
}

// handedOver is what a handover found.
type handedOver struct {
	PID          int    `json:"pid"`
	Version      string `json:"version"`
	Protocol     int    `json:"protocol"`
	How          string `json:"how"` // handover, or signal for a daemon that predates it
	TasksStopped int    `json:"tasks_stopped"`
}

// handOver makes the home's running daemon hand over and waits until it
// has exited. A daemon that answers daemon.handover refuses new tasks,
// lets running ones finish (or stops them), finishes the requests in
// flight and exits; one that predates the operation gets SIGTERM, on
// which every daemon stops the same way. It returns nil when none runs.
func (e *Env) handOver(h home.Home, wait time.Duration, stopTasks bool) (*handedOver, error) {
	if !h.DaemonRunning() {
		return nil, nil
	}
	old := &handedOver{How: "handover"}
	c, err := ipc.Dial(h.Socket(), Version)
	if err == nil {
		if p, perr := api.Ping.Call(c, api.Empty{}); perr == nil {
			old.PID, old.Version, old.Protocol = p.PID, p.Version, p.Protocol
		}
		var rep api.HandoverReply
		rep, err = api.DaemonHandover.Call(c, api.HandoverArgs{WaitMS: wait.Milliseconds(), StopTasks: stopTasks})
		old.Version, old.Protocol = cmp.Or(old.Version, c.DaemonVersion), cmp.Or(old.Protocol, c.DaemonProto)
		c.Close()
		if err == nil {
			old.PID, old.TasksStopped = rep.PID, rep.TasksStopped
		}
	}
	if err != nil {
		switch code := errs.CodeOf(err); {
		case code == errs.EVERSION || code == errs.EINVAL || code == errs.EHOSTDOWN || ipc.Absent(err):
			// A daemon from before the handover operation, or one whose
			// socket is gone: the signal every daemon stops cleanly on.
			pid, perr := lockPID(h)
			if perr != nil {
				return nil, perr
			}
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
				return nil, errs.Wrap(errs.EACCES, err, "signal daemon %d", pid)
			}
			old.PID, old.How = pid, "signal"
		default:
			return nil, err
		}
	}
	// Deliveries in flight finish first (bounded by delivery_timeout),
	// then the log closes and the lock goes.
	limit := 2 * time.Minute
	deadline := time.Now().Add(limit)
	for h.DaemonRunning() {
		if time.Now().After(deadline) {
			return old, errs.New(errs.ETIMEDOUT, "daemon %d did not exit within %s of handing over", old.PID, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return old, nil
}

// lockPID is the pid the daemon holding the home's lock wrote into it.
func lockPID(h home.Home) (int, error) {
	b, err := os.ReadFile(h.Lock())
	if err != nil {
		return 0, errs.Wrap(errs.EHOSTDOWN, err, "read %s", h.Lock())
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, errs.New(errs.EHOSTDOWN, "%s names no daemon pid", h.Lock())
	}
	return pid, nil
}

// DaemonRestartCmd is `cbth daemon restart`.
type DaemonRestartCmd struct {
	Wait      time.Duration `help:"How long running tasks may take to finish; when they take longer the old daemon keeps running and nothing changes." default:"10m"`
	StopTasks bool          `help:"Stop running tasks instead of waiting (TERM, then KILL after kill_grace): their jobs fail, none is run again." name:"stop-tasks"`
}

// The outcomes of daemon restart: a daemon handed over to, or a first one.
const (
	daemonRestarted = "restarted"
	daemonStarted   = "started"
)

// Run hands the home over to a daemon of this binary.
func (c *DaemonRestartCmd) Run(env *Env) error {
	h, err := env.Home()
	if err != nil {
		return err
	}
	if c.Wait < 0 {
		return errs.New(errs.EINVAL, "--wait must not be negative")
	}
	old, err := env.handOver(h, c.Wait, c.StopTasks)
	if err != nil {
		return err
	}
	if err := h.Ensure(); err != nil {
		return err
	}
	cl, err := ipc.Connect(context.Background(), h.Socket(), Version, func() error { return env.spawnDaemon(h, env.startTimeout()) }, env.startTimeout())
	if err != nil {
		return err
	}
	defer cl.Close()
	p, err := api.Ping.Call(cl, api.Empty{})
	if err != nil {
		return err
	}
	out := map[string]any{"outcome": daemonRestarted, "pid": p.PID, "version": p.Version, "protocol": p.Protocol, "old": old}
	if old == nil {
		out["outcome"] = daemonStarted
	}
	return env.emit(out, func(w io.Writer) {
		if old != nil {
			fmt.Fprintf(w, "daemon %d (cbth %s, protocol %d) handed over", old.PID, old.Version, old.Protocol)
			if old.TasksStopped > 0 {
				fmt.Fprintf(w, " after stopping %s", plural.Count(old.TasksStopped, "task", "tasks"))
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "daemon %d (cbth %s, protocol %d) serving\n", p.PID, p.Version, p.Protocol)
	})
}
