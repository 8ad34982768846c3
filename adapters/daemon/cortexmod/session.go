// Package cortexmod is CortexFS in the daemon: the registered ctx trees
// and their files, the model and agent sockets it serves, the session
// directories those sockets record, and the ctx delivery target.
package cortexmod

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cbth-dev/cbth/adapters/cortexfs/agent"
	cortexcli "github.com/cbth-dev/cbth/adapters/cortexfs/cli"
	"github.com/cbth-dev/cbth/adapters/cortexfs/session"
	"github.com/cbth-dev/cbth/adapters/cortexfs/socket"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tool"
	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/confine"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
	"github.com/cbth-dev/cbth/projections/ctxsession"
)

// Module is CortexFS in the daemon.
type Module struct {
	daemon.Base
	h       *daemon.Host
	sockets *cortexcli.ModelSockets
}

// New returns the CortexFS module.
func New() *Module { return &Module{} }

// Name names the module.
func (m *Module) Name() string { return "cortexfs" }

// Start sets up the sockets; they serve from CatchUp on.
func (m *Module) Start(ctx context.Context, h *daemon.Host) error {
	m.h = h
	// The agents and models served here run their shell.exec and the
	// provider helper confined: the daemon tracks them, and refuses them.
	ctx = confine.WithTracker(ctx, h.Confined)
	m.sockets = &cortexcli.ModelSockets{Ctx: ctx, UID: os.Getuid(), Now: h.Clock.Now, Log: h.Log, Shared: h.Config.Ctx.SharedSpaces(),
		Sessions: sessionLog{m}, Jobs: daemonJobs{m}}
	return nil
}

// Ops registers the ctx tree and socket operations.
func (m *Module) Ops(t api.Table) {
	api.Handle(t, api.CtxTreeLoad, func(_ context.Context, a api.TreeArgs) (api.TreeDoc, error) { return m.loadTree(a.Root) })
	api.Handle(t, api.CtxTreeSave, m.saveTree)
	api.Handle(t, api.CtxServe, m.ctxServe)
}

// Targets is the ctx delivery target.
func (m *Module) Targets() []target.Target { return []target.Target{m.ctxTarget()} }

// CatchUp ends the runs the last daemon cut off, then brings the session
// directories and the trees up to date with the log. Session directories
// before the trees: serving the sockets starts with the trees, and a
// session is projected before it is served.
func (m *Module) CatchUp(ctx context.Context) error {
	if err := m.endCutRuns(ctx); err != nil {
		return err
	}
	if err := m.catchUpSessions(); err != nil {
		return err
	}
	return m.catchUpTrees()
}

// KeepAlive: a session run on a socket keeps the daemon up.
func (m *Module) KeepAlive() []string {
	if n := m.sockets.Running(); n > 0 {
		return []string{plural.Count(n, "socket session run", "socket session runs")}
	}
	return nil
}

// sessionLog is session.Log on the daemon's engine: every session change
// is a ctxsession event.
type sessionLog struct{ m *Module }

func sessionStream(dir string) events.StreamID {
	return events.StreamID{Kind: events.KindCtxSession, ID: dir}
}

func (l sessionLog) Append(ctx context.Context, dir, commandID string, ps ...events.Payload) ([]events.Envelope, bool, error) {
	res, err := l.m.h.Eng.Append(ctx, engine.Meta{Actor: events.ActorAdapter, CommandID: commandID, CorrelationID: "ctxsession"},
		sessionStream(dir), engine.AnyVersion, ps...)
	return res.Events, res.Replayed, err
}

func (l sessionLog) Stream(dir string, fn func(events.Envelope) error) error {
	return l.m.h.Eng.ReadStream(sessionStream(dir), fn)
}

func (l sessionLog) Session(dir string) (c *aggregate.CtxSession, err error) {
	err = l.m.h.Eng.Read(func(s engine.Snapshot) error { c, err = query.CtxSession(s, dir); return err })
	return c, err
}

func (l sessionLog) Sessions(root, object, scope string, uid int) (out []*aggregate.CtxSession, err error) {
	err = l.m.h.Eng.Read(func(s engine.Snapshot) error {
		out, err = query.CtxSessions(s, root, object, scope, uid)
		return err
	})
	return out, err
}

// daemonJobs is cbth.job.submit inside the daemon: the job.submit
// operation without the socket.
type daemonJobs struct{ m *Module }

func (j daemonJobs) Submit(ctx context.Context, job tool.Job) (string, error) {
	defer j.m.h.Poke(ctx)
	rep, err := j.m.h.Submit(ctx, api.SubmitArgs{TargetKind: command.Target(job.TargetKind), SourceThreadID: job.ThreadID, TaskKind: job.TaskKind,
		TaskSummary: job.Summary, DedupeKey: job.DedupeKey})
	return rep.JobID, err
}

// ctxTarget is the ctx delivery target on the daemon's agent sockets.
func (m *Module) ctxTarget() *target.CtxTarget {
	return &target.CtxTarget{Agents: func(name string) (target.AgentSessions, error) {
		srv, err := m.sockets.Agent(name)
		if err != nil {
			return nil, err
		}
		loop, ok := srv.Turn.(*agent.Loop)
		if !ok {
			return nil, errs.New(errs.EINTERNAL, "agent %s is served without its loop", name)
		}
		return servedAgent{srv, loop}, nil
	}, Turns: m.ctxTurn}
}

// servedAgent is an agent's socket server with the loop it runs, whose
// tools and trust the ctx gate reads.
type servedAgent struct {
	*socket.Server
	loop *agent.Loop
}

func (a servedAgent) Trust() ([]string, bool) { return a.loop.Acting(), a.loop.TrustedAll }

// ctxTurn finds, in the log, the turn msgID started in the private
// session a ctx thread names, and how its run ended. It reads the log
// alone, so it answers at start-up before any agent socket is served.
// More than one tree with that session is EINVAL: the thread names no
// tree, so nothing is proven.
func (m *Module) ctxTurn(_ context.Context, thread, msgID string) (target.CtxTurn, error) {
	agent, sess, err := target.ParseCtxThread(thread)
	if err != nil {
		return target.CtxTurn{}, err
	}
	uid := os.Getuid()
	var dirs []string
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		return query.AllCtxSessions(s, func(c *aggregate.CtxSession) error {
			if c.Object == "agent/"+agent && c.Scope == session.ScopePrivate && c.UID == uid && c.Name == sess {
				dirs = append(dirs, c.ID)
			}
			return nil
		})
	}); err != nil {
		return target.CtxTurn{}, err
	}
	switch len(dirs) {
	case 0:
		// The session was never opened, so the turn was never recorded.
		return target.CtxTurn{}, nil
	case 1:
	default:
		return target.CtxTurn{}, errs.New(errs.EINVAL, "ctx thread %s names a session in %d trees", thread, len(dirs))
	}
	var turn target.CtxTurn
	ends := map[string]string{}
	err = m.h.Eng.ReadStream(sessionStream(dirs[0]), func(env events.Envelope) error {
		p, err := events.DecodePayload(&env)
		if err != nil {
			return err
		}
		switch p := p.(type) {
		case *events.CtxSessionMessage:
			if p.ID == msgID && p.Role == "user" && !turn.Found {
				turn.Found, turn.RunID = true, p.Run
			}
		case *events.CtxSessionEvent:
			var f struct{ Type, Run, Status string }
			if json.Unmarshal(p.Event, &f) == nil && f.Type == stream.TypeDone {
				ends[f.Run] = f.Status
			}
		}
		return nil
	})
	turn.Status = ends[turn.RunID]
	return turn, err
}

// catchUpSessions makes every recorded session directory and index match
// the log: a directory whose files differ from their rendering (deleted,
// edited, or behind because the daemon stopped between an append and its
// projection) is rewritten from the session's events.
func (m *Module) catchUpSessions() error {
	var all []*aggregate.CtxSession
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		return query.AllCtxSessions(s, func(c *aggregate.CtxSession) error { all = append(all, c); return nil })
	}); err != nil {
		return err
	}
	type group struct {
		root, object, scope string
		uid                 int
	}
	groups := map[group]string{} // -> index directory
	for _, c := range all {
		dir := c.ID
		groups[group{c.Root, c.Object, c.Scope, c.UID}] = filepath.Join(filepath.Dir(dir), ctxsession.DirIndex)
		files := ctxsession.Small(c)
		if sizesCurrent(dir, c) && session.Current(dir, files) {
			continue
		}
		full, err := ctxsession.Render(c, func(fn func(events.Envelope) error) error { return m.h.Eng.ReadStream(sessionStream(dir), fn) })
		if err != nil {
			return err
		}
		if err := session.WriteSmall(dir, full); err != nil {
			return err
		}
	}
	for g, idx := range groups {
		ss, err := sessionLog{m}.Sessions(g.root, g.object, g.scope, g.uid)
		if err != nil {
			return err
		}
		if err := session.WriteIndex(idx, ctxsession.Index(ss)); err != nil {
			return err
		}
	}
	return nil
}

// sizesCurrent compares the JSONL files' sizes with the sizes their
// events give them: a start checks a session's history by two stats, not
// by reading it (the files only ever grow by whole lines, so a missing,
// truncated, half-written or extended file has another size).
func sizesCurrent(dir string, c *aggregate.CtxSession) bool {
	for f, want := range map[string]int64{ctxsession.FileMessages: c.MessagesBytes, ctxsession.FileEvents: c.EventsBytes} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || !st.Mode().IsRegular() || st.Size() != want {
			return false
		}
	}
	return true
}

// endCutRuns ends, at start-up, every session run the last daemon did not
// live to end (killed mid-run: runs live in the daemon's process). Such a
// session is still active in the log, and its last run has a start frame
// and no done frame; it gets an error frame (EHOSTDOWN: the daemon went
// away) and a done frame with status interrupted, then the error state,
// so its state file and `cbth ctx session show` say the run is over. A
// session left active with no open run (cut between its message and its
// start frame) only moves to error. The command id names the run, so a
// replayed start appends nothing twice. It runs after the delivery
// reconcile, though the ctx target reads interrupted as no end at all
// (adapters/target/ctx.go runEnd), so the order does not change a proof.
func (m *Module) endCutRuns(ctx context.Context) error {
	var active []string
	if err := m.h.Eng.Read(func(s engine.Snapshot) error {
		return query.AllCtxSessions(s, func(c *aggregate.CtxSession) error {
			if c.State == fsm.CtxSessionActive {
				active = append(active, c.ID)
			}
			return nil
		})
	}); err != nil {
		return err
	}
	for _, dir := range active {
		var open string
		var seq uint64
		if err := m.h.Eng.ReadStream(sessionStream(dir), func(env events.Envelope) error {
			p, err := events.DecodePayload(&env)
			if err != nil {
				return err
			}
			ev, ok := p.(*events.CtxSessionEvent)
			if !ok {
				return nil
			}
			var f stream.Event
			if json.Unmarshal(ev.Event, &f) != nil {
				return nil
			}
			if n, err := session.Seq(f.ID); err == nil && n > seq {
				seq = n
			}
			switch f.Type {
			case stream.TypeStart:
				open = f.Run
			case stream.TypeDone:
				if f.Run == open {
					open = ""
				}
			}
			return nil
		}); err != nil {
			return err
		}
		var ps []events.Payload
		cmd := "ctxsession/" + dir + "/ended-at-start"
		if open != "" {
			cmd += "/" + open
			for _, f := range []stream.Event{
				{Type: stream.TypeError, ID: session.EventID(seq + 1), Run: open, Code: errs.EHOSTDOWN,
					Message: "the daemon stopped during this run; the next start ended it"},
				{Type: stream.TypeDone, ID: session.EventID(seq + 2), Run: open, Status: stream.StatusInterrupted},
			} {
				line, err := stream.Encode(f)
				if err != nil {
					return err
				}
				ps = append(ps, &events.CtxSessionEvent{Event: events.RawJSON(bytes.TrimRight(line, "\n"))})
			}
		}
		ps = append(ps, &events.CtxSessionStateChanged{State: string(fsm.CtxSessionError)})
		if _, _, err := (sessionLog{m}).Append(ctx, dir, cmd, ps...); err != nil {
			return fmt.Errorf("end the cut run of session %s: %w", dir, err)
		}
		m.h.Log.Warn("session run cut off by the last daemon's stop; ended as interrupted", "session", dir, "run", open)
	}
	return nil
}
