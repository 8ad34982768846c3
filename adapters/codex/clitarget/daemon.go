package clitarget

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// daemonRetry is how soon a head waiting for the user's Codex daemon (not
// running, or the thread not open in it) is asked about again: the daemon
// is someone else's, and nothing tells cbth when the user opens Codex, so
// cbth looks (one stat of the socket while it does not run) as often as
// a user waiting for the result would notice; probeRetry, after a daemon
// failed the probe or its socket was refused, less often: only a Codex
// update or the user's repair changes that.
const (
	daemonRetry = 2 * time.Second
	probeRetry  = 30 * time.Second
)

// daemonGate is Gate for a thread no `cbth cli run` foreground holds: it
// goes through the user's Codex daemon. What is known without asking: a
// parked session waits for the operator; no daemon socket means no
// daemon; the daemon instance cbth follows may have reported a turn
// running on the thread. Finding the daemon, the thread's load state and
// the reading are Prepare's.
func (t *Target) daemonGate(h target.Head, s *aggregate.Session) target.Gate {
	d := t.cfg.CodexDaemon
	if s != nil && s.State == fsm.SessionParked {
		return target.Gate{Reason: t.reason("managed session %s is parked: a batch of the thread waits for manual resolution (cbth batch inspect-head --source-thread-id %s)", s.ID, h.ThreadID)}
	}
	if _, err := os.Lstat(sessions.DaemonSocket(d.CodexHome())); err != nil {
		if trust, err := t.trustOf(h.ThreadID); err == nil && t.queueable(s, trust) == "" {
			return t.queueGate(h, s) // Prepare checks again
		}
		why := fmt.Sprintf("the Codex daemon of %s does not run (no %s); the result goes when the thread is open in Codex again (codex resume %s)",
			d.CodexHome(), sessions.DaemonSocket(d.CodexHome()), h.ThreadID)
		if s != nil && s.Mode != codex.ModeCodexDaemon {
			why = fmt.Sprintf("managed session %s is %s; delivery waits for a foreground (cbth cli run --bind-thread-id %s), or for %s", s.ID, s.State, h.ThreadID, why)
		}
		return target.Gate{Reason: t.reason("%s", why), Retry: t.now().Add(daemonRetry)}
	}
	if inst, _ := d.Current(); inst != "" && s != nil && s.AppServerInstance == inst && d.ThreadStatus(h.ThreadID) == appserver.ThreadActive {
		return target.Gate{Reason: t.reason("a turn runs on the thread; delivery waits until it is idle")}
	}
	route := command.Route{RPCKind: command.RPCTurnStart, DeliveryMode: command.ModeCLIStart}
	if s != nil {
		route.ManagedSessionID, route.SessionEpoch = s.ID, s.Epoch
	}
	return target.Gate{OK: true, Route: route}
}

// daemonPrepare is Prepare through the user's Codex daemon: it finds the
// daemon (checked and probed), binds the thread's session to the running
// instance when it is not (handed to the scheduler to record, then asked
// again), and takes a fresh reading on it. A thread the daemon has not
// loaded is resumed (which loads it) only where delivery without a
// foreground could go anyway: the thread trusted with its own
// permissions, or a startup cap all false.
func (t *Target) daemonPrepare(ctx context.Context, h target.Head, g target.Gate, s *aggregate.Session) target.Gate {
	d := t.cfg.CodexDaemon
	wait := func(format string, a ...any) target.Gate {
		return target.Gate{Reason: t.reason(format, a...), Retry: t.now().Add(daemonRetry)}
	}
	found, err := d.Ensure(ctx)
	if err != nil {
		if errs.CodeOf(err) == errs.EHOSTDOWN {
			if trust, terr := t.trustOf(h.ThreadID); terr == nil && t.queueable(s, trust) == "" {
				return t.queueGate(h, s)
			}
			return wait("%v (%s); the result goes when the thread is open in Codex again (codex resume %s)", err, errs.CodeOf(err), h.ThreadID)
		}
		return target.Gate{Reason: t.reason("the Codex daemon of %s cannot be used: %v (%s)", d.CodexHome(), err, errs.CodeOf(err)), Retry: t.now().Add(probeRetry)}
	}
	if found.Probe != nil {
		return target.Gate{Reason: t.reason("the Codex daemon (%s) failed the capability probe: %v (%s)", found.UserAgent, found.Probe, errs.CodeOf(found.Probe)), Retry: t.now().Add(probeRetry)}
	}
	trust, err := t.trustOf(h.ThreadID)
	if err != nil {
		return wait("read the thread's trust: %v", err)
	}
	loaded, err := d.Loaded(ctx, found.Nonce, h.ThreadID)
	if err != nil {
		return wait("ask the Codex daemon whether thread %s is open: %v (%s)", h.ThreadID, err, errs.CodeOf(err))
	}
	if !loaded && trust != events.TrustOwnPermissions && (s == nil || !strictCap(s)) {
		return wait("thread %s is not open in Codex, and only a thread trusted with its own permissions or proven strict-safe is opened without you: the result goes when you open it (codex resume %s)", h.ThreadID, h.ThreadID)
	}
	if s == nil || s.State == fsm.SessionStale || s.AppServerInstance != found.Nonce {
		ts, err := d.Resume(ctx, found.Nonce, h.ThreadID)
		if err != nil {
			return wait("resume thread %s on the Codex daemon: %v (%s)", h.ThreadID, err, errs.CodeOf(err))
		}
		bind := &codex.DaemonBinding{BindDaemonSession: codex.BindDaemonSession{ThreadID: h.ThreadID, Instance: found.Nonce,
			Reading: sessions.ReadingOf(ts), ThreadSource: ts.Thread.SourceName()}}
		// The binding is recorded by the scheduler, whose append asks for
		// the next pass; the retry only bounds a refused binding.
		return target.Gate{Reason: t.reason("binding the thread's session to the Codex daemon (instance %s)", found.Nonce), Route: command.Route{Gate: bind}, Retry: t.now().Add(time.Second)}
	}
	ref, held := t.read(ctx, d, s.ID)
	if held != nil {
		if held.Retry.IsZero() && held.Route.Gate == nil {
			held.Retry = t.now().Add(retryIn)
		}
		return *held
	}
	g.Route.ManagedSessionID, g.Route.SessionEpoch = ref.SessionID, ref.Epoch
	return t.gateReading(ctx, h, g, d, ref, false)
}

// strictCap reports whether a session's startup cap is all false: its
// effective permissions are then false whatever the thread says now.
func strictCap(s *aggregate.Session) bool {
	for _, v := range s.Startup.Values() {
		if v != events.AllowFalse {
			return false
		}
	}
	return true
}
