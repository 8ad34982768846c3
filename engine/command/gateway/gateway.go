// Package gateway holds the channel gateway's commands: routes and the
// envelopes of a stream. It stands on the core (engine/command), never the
// other way.
package gateway

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// The remote modes of ssh_remote and its error event type
// (adapters/gateway/envelope).
const (
	modeIDEPrimary       = "ide_primary"
	modeTerminalFallback = "terminal_fallback"
	envelopeError        = "error"
)

// GatewayRouteID is the stream id of a routing key. Both parts are
// path-escaped, so the one "/" between them is unambiguous.
func GatewayRouteID(workspaceID, agentID string) string {
	return url.PathEscape(workspaceID) + "/" + url.PathEscape(agentID)
}

// Route destinations.
const (
	RouteCtxPrefix    = "ctx:"
	RouteThreadPrefix = "thread:"
	// RouteSSHPrefix names another machine's gateway, reached over ssh:
	// ssh:NAME, NAME a [gateway.remotes.NAME] table of config.toml.
	RouteSSHPrefix = "ssh:"
)

// RouteTargetSSH is the target of an ssh:NAME route.
const RouteTargetSSH = "ssh"

// CheckRoute says whether a destination and target kind go together: a
// ctx:<object> route has target ctx, a thread:<id> route a delivery
// target (cli, desktop or debug), an ssh:<remote> route target ssh.
func CheckRoute(to, target string) error {
	switch {
	case strings.HasPrefix(to, RouteCtxPrefix):
		rel := strings.TrimPrefix(to, RouteCtxPrefix)
		if len(rel) > command.MaxIDLen {
			return errs.New(errs.EINVAL, "route %q is longer than %d bytes", to, command.MaxIDLen)
		}
		parts := strings.Split(rel, "/")
		if (parts[0] != "agent" || len(parts) != 2) && (parts[0] != "model" || len(parts) != 3) {
			return errs.New(errs.EINVAL, "route %q: a ctx route names agent/<name> or model/<provider>/<model>", to)
		}
		for _, p := range parts {
			if p == "" || p == "." || p == ".." || strings.ContainsAny(p, "\x00\n") {
				return errs.New(errs.EINVAL, "route %q: bad path component %q", to, p)
			}
		}
		if target != string(command.TargetCtx) {
			return errs.New(errs.EINVAL, "route %q goes to a CortexFS socket session: its target is ctx, not %q", to, target)
		}
	case strings.HasPrefix(to, RouteThreadPrefix):
		if err := command.CheckID("thread id", strings.TrimPrefix(to, RouteThreadPrefix)); err != nil {
			return err
		}
		if !slices.Contains(command.ThreadRouteTargets(), target) {
			return errs.New(errs.EINVAL, "route %q is a delivery into a thread: its target is %s, not %q", to, strings.Join(command.ThreadRouteTargets(), ", "), target)
		}
	case strings.HasPrefix(to, RouteSSHPrefix):
		if err := name.Valid(strings.TrimPrefix(to, RouteSSHPrefix)); err != nil {
			return errs.Wrap(errs.EINVAL, err, "route %q: ssh:NAME names a [gateway.remotes.NAME] of config.toml", to)
		}
		if target != RouteTargetSSH {
			return errs.New(errs.EINVAL, "route %q goes to another machine's gateway: its target is ssh, not %q", to, target)
		}
	default:
		return errs.New(errs.EINVAL, "route %q: give ctx:agent/NAME (or ctx:model/P/M), thread:THREAD_ID or ssh:REMOTE", to)
	}
	return nil
}

// AddRoute points a routing key at a destination.
type AddRoute struct {
	engine.Answers[string]

	WorkspaceID, AgentID, To, Target string
}

// Decide implements engine.Decider.
func (c AddRoute) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := command.CheckID("workspace id", c.WorkspaceID); err != nil {
		return engine.Decision{}, err
	}
	if err := command.CheckID("agent id", c.AgentID); err != nil {
		return engine.Decision{}, err
	}
	if err := CheckRoute(c.To, c.Target); err != nil {
		return engine.Decision{}, err
	}
	id := GatewayRouteID(c.WorkspaceID, c.AgentID)
	r, err := engine.GatewayRoute(v, id)
	if err != nil {
		return engine.Decision{}, err
	}
	out := command.OutcomeAdded
	if r != nil && r.State == fsm.GatewayRouteActive {
		if r.To == c.To && r.Target == c.Target {
			return c.Answer(engine.Decision{Outcome: command.OutcomeUnchanged}, id), nil
		}
		out = command.OutcomeReplaced
	}
	return c.Answer(engine.Decision{Outcome: out, Emits: []engine.Emit{{
		Stream:  events.StreamID{Kind: events.KindGatewayRoute, ID: id},
		Payload: &events.GatewayRouteAdded{WorkspaceID: c.WorkspaceID, AgentID: c.AgentID, To: c.To, Target: c.Target},
	}}}, id), nil
}

// RemoveRoute takes a routing key's route away.
type RemoveRoute struct {
	engine.Answers[string]

	WorkspaceID, AgentID string
}

// Decide implements engine.Decider.
func (c RemoveRoute) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	id := GatewayRouteID(c.WorkspaceID, c.AgentID)
	r, err := engine.GatewayRoute(v, id)
	if err != nil {
		return engine.Decision{}, err
	}
	if r == nil || r.State != fsm.GatewayRouteActive {
		return engine.Decision{}, errs.New(errs.ENOENT, "no route for workspace %q agent %q", c.WorkspaceID, c.AgentID)
	}
	return c.Answer(engine.Decision{Outcome: command.OutcomeRemoved, Emits: []engine.Emit{{
		Stream: events.StreamID{Kind: events.KindGatewayRoute, ID: id}, Payload: &events.GatewayRouteRemoved{},
	}}}, id), nil
}

// ModeAfter is an ssh_remote stream's remote mode after an envelope: an
// error while in (or reported from) ide_primary downgrades to
// terminal_fallback, with the envelope's reason code, else its error
// code, else ide_primary_error; otherwise the envelope's mode. A
// downgrade the client states itself must give its reason code.
func ModeAfter(cur string, rec *events.GatewayEnvelopeRecorded) (to, why string, err error) {
	reason := rec.ReasonCode
	if rec.ChannelType != "ssh_remote" {
		return cur, "", nil
	}
	if rec.Type == envelopeError && (cur == modeIDEPrimary || rec.RemoteMode == modeIDEPrimary) {
		why = reason
		if why == "" {
			why = rec.ErrorCode
		}
		if why == "" {
			why = "ide_primary_error"
		}
		return modeTerminalFallback, why, nil
	}
	if cur == modeIDEPrimary && rec.RemoteMode == modeTerminalFallback && reason == "" {
		return cur, "", errs.New(errs.EINVAL, "a downgrade from ide_primary to terminal_fallback needs a reason_code")
	}
	return rec.RemoteMode, reason, nil
}

// RecordEnvelope records one inbound envelope's metadata on its stream,
// with the gap it opens and the mode change it makes. A seq the stream
// already received is a duplicate: nothing is appended.
type RecordEnvelope struct {
	StreamID string
	Rec      events.GatewayEnvelopeRecorded
}

// Decide implements engine.Decider.
func (c RecordEnvelope) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if err := command.CheckID("stream id", c.StreamID); err != nil {
		return engine.Decision{}, err
	}
	if c.Rec.Seq < 1 {
		return engine.Decision{}, errs.New(errs.EINVAL, "seq must be at least 1")
	}
	sid := events.StreamID{Kind: events.KindGatewayStream, ID: c.StreamID}
	st, err := engine.GatewayStream(v, c.StreamID)
	if err != nil {
		return engine.Decision{}, err
	}
	if st == nil {
		st = &aggregate.GatewayStream{}
	}
	rec := c.Rec
	if rec.Outcome == events.GatewayRefused || rec.Outcome == events.GatewayFailed {
		// Recorded, but its seq stays unused: a refused envelope can be
		// sent again once routable, a failed one once its destination is
		// back (at-least-once).
		return engine.Decision{Outcome: engine.Outcome(rec.Outcome), Emits: []engine.Emit{{Stream: sid, Payload: &rec}}}, nil
	}
	if st.Seen(rec.Seq) {
		return engine.Decision{Outcome: events.GatewayDuplicate}, nil
	}
	emits := []engine.Emit{{Stream: sid, Payload: &rec}}
	if rec.Seq > st.HighSeq+1 {
		emits = append(emits, engine.Emit{Stream: sid, Payload: &events.GatewayGapReported{From: st.HighSeq + 1, To: rec.Seq - 1}})
	}
	to, why, err := ModeAfter(st.RemoteMode, &rec)
	if err != nil {
		return engine.Decision{}, err
	}
	if to != st.RemoteMode {
		emits = append(emits, engine.Emit{Stream: sid, Payload: &events.GatewayModeChanged{From: st.RemoteMode, To: to, ReasonCode: why, Seq: rec.Seq}})
	}
	return engine.Decision{Outcome: engine.Outcome(rec.Outcome), Emits: emits}, nil
}
