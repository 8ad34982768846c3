package codexmod

import (
	"context"
	"fmt"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Where says where a result for a Codex CLI thread will arrive, for the
// agent that hands its work to cbth from inside that thread (the MCP
// tools' answer): as the user's case is, not as it could be. A thread
// that runs under `cbth cli run` takes it as a new turn once idle. Any
// other goes through the user's Codex daemon: its session is bound to
// the daemon's instance now, while the agent's turn has the thread open,
// so the permissions it was started with are the ones on record (the
// startup cap), and then the answer is what the delivery's gate would
// say: a new turn when the thread is strict-safe or trusted with its own
// permissions; held until the user trusts it otherwise, naming the
// command; or, with no daemon, when the thread is open in Codex again.
func (m *Module) Where(ctx context.Context, thread string) (api.MCPDelivery, error) {
	s, err := m.session(thread)
	if err != nil {
		return api.MCPDelivery{}, err
	}
	if s != nil && s.State == fsm.SessionLive {
		return api.MCPDelivery{When: api.DeliverWhenIdle,
			Hint: "the result comes back into this thread as a new turn once the job is done and the thread is idle"}, nil
	}
	opened := api.MCPDelivery{When: api.DeliverWhenOpened,
		Hint: "the result comes back into this thread once it is open under cbth: cbth cli run --bind-thread-id " + thread}
	if m.daemon == nil {
		return opened, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	f, err := m.daemon.Ensure(ctx)
	switch {
	case errs.CodeOf(err) == errs.EHOSTDOWN:
		opened.Hint = fmt.Sprintf("the result comes back into this thread once it is open in Codex again (codex resume %s), or under cbth (cbth cli run --bind-thread-id %s): Codex's daemon does not run", thread, thread)
		return opened, nil
	case err != nil:
		opened.Hint = fmt.Sprintf("cbth cannot use Codex's daemon (%v): the result comes back into this thread once it is open under cbth (cbth cli run --bind-thread-id %s)", err, thread)
		return opened, nil
	case f.Probe != nil:
		opened.Hint = fmt.Sprintf("Codex's daemon (%s) lacks what cbth needs (%v): the result comes back into this thread once it is open under cbth (cbth cli run --bind-thread-id %s)", f.UserAgent, f.Probe, thread)
		return opened, nil
	}
	ts, err := m.daemon.Resume(ctx, f.Nonce, thread)
	if err != nil {
		opened.Hint = fmt.Sprintf("Codex's daemon cannot open this thread (%v): the result comes back once it is open under cbth (cbth cli run --bind-thread-id %s)", err, thread)
		return opened, nil
	}
	bound, res, err := engine.Exec[codex.AttachResult](ctx, m.h.Eng, meta, codex.BindDaemonSession{ThreadID: thread, Instance: f.Nonce,
		Reading: sessions.ReadingOf(ts), ThreadSource: ts.Thread.SourceName()})
	if err != nil {
		return api.MCPDelivery{}, err
	}
	if res.Outcome == codex.SessionRefused {
		opened.Hint = fmt.Sprintf("%s: the result waits for it", bound.Refusal.Message)
		return opened, nil
	}
	trust, err := m.trustOf(thread)
	if err != nil {
		return api.MCPDelivery{}, err
	}
	eff := bound.Obs.Effective
	switch {
	case trust == events.TrustOwnPermissions:
		return api.MCPDelivery{When: api.DeliverWhenIdle,
			Hint: "the result comes back into this thread as a new turn once the job is done and the thread is idle, with this thread's own permissions (the user trusted it)"}, nil
	case strictSafe(eff) && strictSafe(bound.Obs.Current):
		return api.MCPDelivery{When: api.DeliverWhenIdle,
			Hint: "the result comes back into this thread as a new turn once the job is done and the thread is idle"}, nil
	}
	return api.MCPDelivery{When: api.DeliverHeldForTrust,
		Hint: fmt.Sprintf("the result is kept until the user trusts this thread, because it may write, reach the network or ask for approvals: they run cbth thread trust --thread-id %s --own-permissions (or open it under cbth: cbth cli run --bind-thread-id %s); tell the user so", thread, thread)}, nil
}

func strictSafe(p events.Permissions) bool {
	for _, v := range p.Values() {
		if v != events.AllowFalse {
			return false
		}
	}
	return true
}

func (m *Module) session(thread string) (*aggregate.Session, error) {
	var s *aggregate.Session
	err := m.h.Eng.Read(func(v engine.Snapshot) error {
		var err error
		s, err = codex.SessionOf(v, thread)
		return err
	})
	return s, err
}

// trustOf is the thread's trust: its own, else the home's.
func (m *Module) trustOf(thread string) (string, error) {
	tr := m.h.Config.CLI.HomeTrust()
	err := m.h.Eng.Read(func(v engine.Snapshot) error {
		own, err := codex.TrustOf(v, thread)
		if own != "" {
			tr = own
		}
		return err
	})
	return tr, err
}
