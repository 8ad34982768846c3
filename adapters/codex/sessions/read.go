package sessions

import (
	"context"
	"errors"
	"strings"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/internal/errs"
)

// ErrAwaitingFirstTurn is the class of Read's answer for a thread the
// running instance started that has not begun a turn: Codex writes a
// thread's rollout when its first turn starts, and until then no other
// connection can resume it or read its permissions. Nothing is wrong
// with the thread; delivery waits for that turn.
var ErrAwaitingFirstTurn = errors.New("the thread has not begun its first turn")

// ThreadReading is a fresh reading of a managed session's thread that
// nobody has recorded yet: what the CLI delivery target takes before
// every automatic turn/start.
type ThreadReading struct {
	// Observation is what recording the reading now would give: its
	// Effective is the most the turn may be given.
	codex.Observation
	// Thread is the thread/resume answer it came from (its cwd, model and
	// permissions, which a turn/start may need to repeat).
	Thread appserver.ThreadSession
	// Instance is the app-server instance the reading was taken on.
	Instance string
	// Record records the reading (nil when there is nothing to record:
	// a host-plugin lease has no session aggregate). It goes into the log
	// with the delivery's barrier, in the same append.
	Record *codex.ObservePermissions
}

// Unreachable is Read's error when Codex's own answer proves the
// session's thread cannot be reached through this app-server now (gone,
// or another process holds it). Stale is the record that says so; the
// delivery that asked hands it to the scheduler to record.
type Unreachable struct {
	Stale codex.MarkSessionStale
	err   error
}

func (u *Unreachable) Error() string { return u.err.Error() }
func (u *Unreachable) Unwrap() error { return u.err }

func errStale(nonce string) error {
	return errs.New(errs.ESTALE, "codex app-server instance %s is not the running one", nonce)
}

// Resume resumes thread on the connection to instance (which subscribes
// the connection to the thread's turns) and keeps what the answer says
// of the thread: it has a rollout, and its status.
func (e *endpoint) Resume(ctx context.Context, instance, thread string) (appserver.ThreadSession, error) {
	c, err := e.Client(instance)
	if err != nil {
		return appserver.ThreadSession{}, err
	}
	ts, err := c.ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: thread, ExcludeTurns: true})
	if err != nil {
		return ts, resumeError(thread, err)
	}
	e.born(thread)
	e.noteStatus(instance, thread, ts.Thread.Status.Type)
	return ts, nil
}

// Read reads a session's thread again and records nothing. It fails with
// ESTALE when the session's epoch is not the running instance's (the
// epoch moved on; the caller reads the session again), with
// ErrAwaitingFirstTurn (EAGAIN) without asking Codex while the thread has
// not begun its first turn, with *Unreachable when Codex's refusal proves
// the thread cannot be reached, and with the resume's error otherwise.
func (e *endpoint) Read(ctx context.Context, sessionID string) (ThreadReading, error) {
	in, err := e.ensure(ctx)
	if err != nil {
		return ThreadReading{}, err
	}
	s, err := e.book.Session(sessionID)
	if err != nil {
		return ThreadReading{}, err
	}
	if s == nil {
		return ThreadReading{}, errs.New(errs.ENOENT, "no managed session %s", sessionID)
	}
	if s.AppServerInstance != in.nonce {
		return ThreadReading{}, errs.New(errs.ESTALE, "session %s is at epoch %d on instance %s, not the running %s", s.ID, s.Epoch, s.AppServerInstance, in.nonce)
	}
	if e.awaitingFirstTurn(in.nonce, s.BoundThreadID) {
		// Checked before asking: a resume would be refused "no rollout
		// found", which for any other thread proves it gone.
		return ThreadReading{}, errs.Wrap(errs.EAGAIN, ErrAwaitingFirstTurn, "thread %s has no rollout until its first turn", s.BoundThreadID)
	}
	ts, err := e.Resume(ctx, in.nonce, s.BoundThreadID)
	if err != nil {
		if why := unreachable(err); why != "" {
			return ThreadReading{}, &Unreachable{Stale: codex.MarkSessionStale{SessionID: s.ID, Reason: why}, err: err}
		}
		return ThreadReading{}, err
	}
	rec := &codex.ObservePermissions{SessionID: s.ID, Instance: in.nonce, Reading: ReadingOf(ts)}
	if err := rec.Refusal(s); err != nil {
		return ThreadReading{}, err
	}
	obs := rec.Observed(s)
	if obs.Drift != nil && obs.Drift.Recorded {
		e.log.Warn(obs.Drift.Warning(s.ID))
	}
	return ThreadReading{Observation: obs, Thread: ts, Instance: in.nonce, Record: rec}, nil
}

// The refusals of thread/resume that show Codex has no such thread: none
// in its home (or one that never began a turn), or a loaded thread whose
// rollout was deleted under it.
var goneMessages = []string{"no rollout found", "thread not found", "missing source rollout"}

// refusedWith reports whether err is Codex's answer carrying one of msgs.
func refusedWith(err error, msgs ...string) bool {
	var rpc *appserver.RPCError
	if !errors.As(err, &rpc) {
		return false
	}
	for _, s := range msgs {
		if strings.Contains(rpc.Message, s) {
			return true
		}
	}
	return false
}

// resumeError classes a failed thread/resume: a thread the app-server
// cannot find is ENOENT; another refusal keeps its class; no answer stays
// what it was (it proves nothing).
func resumeError(thread string, err error) error {
	if refusedWith(err, goneMessages...) {
		return errs.Wrap(errs.ENOENT, err, "codex has no thread %s in its home (or it never had a turn)", thread)
	}
	return errs.Wrap(errs.CodeOf(err), err, "resume thread %s", thread)
}

// unreachable says why a refused thread/resume shows the thread cannot be
// reached through this app-server ("" when it does not): Codex has no
// such thread, or another process holds it. The caller has ruled out a
// thread of this instance that has not begun its first turn, which has
// no rollout yet and is refused the same way.
func unreachable(err error) string {
	var rpc *appserver.RPCError
	if errors.As(err, &rpc) && (refusedWith(err, goneMessages...) || refusedWith(err, "active writer")) {
		return "thread/resume refused: " + rpc.Message
	}
	return ""
}
