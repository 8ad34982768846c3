package clitarget

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/adapters/artifact"
	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/target"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/internal/plural"
)

// send carries out one delivery (Gate.Send of Prepare's answer): one
// turn/start carrying the continuation prompt (with the correlation
// marker) and the pinned permissions, on the connection of the instance
// Prepare read. An answer with a result is accepted; an error answer is
// a proven reject; no answer is reconciled by the marker on the same
// instance.
func (t *Target) send(ctx context.Context, d command.Delivery, p prep) target.Result {
	if p.session != d.ManagedSessionID || p.epoch != d.SessionEpoch || (p.steer != "") != (d.RPCKind == command.RPCTurnSteer) {
		// The barrier names another session, epoch or rpc kind than the
		// reading this send was prepared on.
		return target.Result{Outcome: command.RejectedBefore, Reason: errNotPrepared.Error()}
	}
	c, err := p.ep.Client(p.instance)
	if err != nil {
		return target.Result{Outcome: command.RejectedBefore, Reason: "turn/start not sent: " + err.Error()}
	}
	prompt, err := t.prompt(d)
	if err != nil {
		return target.Result{Outcome: command.RejectedBefore, Reason: "turn/start not sent: " + err.Error()}
	}
	params := p.params
	params.Input = []appserver.Input{appserver.TextInput(prompt)}
	tr := &track{ep: p.ep, attempt: d.AttemptID, thread: d.ThreadID, instance: p.instance, session: d.ManagedSessionID,
		epoch: d.SessionEpoch, marker: d.Marker}
	t.mu.Lock()
	t.tracks[d.ThreadID] = tr
	t.mu.Unlock()

	method := appserver.MethodTurnStart
	var turnID string
	if p.steer != "" {
		// The steer carries no permissions: it joins a turn that runs
		// under the thread's own, which Prepare read and classified.
		method = appserver.MethodTurnSteer
		turnID, err = c.TurnSteer(ctx, appserver.TurnSteerParams{ThreadID: d.ThreadID, ExpectedTurnID: p.steer, Input: params.Input})
	} else {
		var turn appserver.Turn
		turn, err = c.TurnStart(ctx, params)
		turnID = turn.ID
	}
	if err == nil {
		return t.accepted(tr, turnID, "")
	}
	if code, answered := appserver.RPCCode(err); answered {
		// Proven: the server answered this request and did not take it
		// (for a steer: no active turn, or another one than expected).
		t.drop(tr)
		return target.Result{Outcome: command.RejectedBefore, Reason: fmt.Sprintf("%s refused (JSON-RPC %d): %v", method, code, err)}
	}
	t.log.Warn(method+" got no answer; looking for its marker", "thread", d.ThreadID, "attempt", d.AttemptID, "marker", d.Marker, "err", err)
	return t.reconcile(context.WithoutCancel(ctx), tr, err)
}

func (t *Target) drop(tr *track) {
	t.mu.Lock()
	if t.tracks[tr.thread] == tr {
		delete(t.tracks, tr.thread)
	}
	t.mu.Unlock()
}

// accepted fixes tr's turn id and returns the acceptance with the events
// of that turn seen so far (end, when the lookup found the turn over
// already and no notification said so).
func (t *Target) accepted(tr *track, turnID, end string) target.Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr.turnID = turnID
	var evs []string
	for _, s := range tr.seen {
		if s.turn == turnID && !slices.Contains(evs, s.event) {
			evs = append(evs, s.event)
		}
	}
	tr.seen = nil
	if end != "" && !slices.Contains(evs, end) {
		evs = append(evs, end)
	}
	for _, ev := range evs {
		if terminalEvent(ev) {
			tr.ended = true
		}
	}
	return target.Result{Outcome: command.Accepted, TurnID: turnID, Tracks: true, Turn: evs}
}

// reconcile decides a turn/start that got no answer, on the same instance
// only: exactly one turn of the thread carrying the marker is the
// accepted turn; none, with the thread seen idle for SettleDelay, proves
// the request was not taken; anything else (the instance gone, the
// marker in several turns, no settled answer within ReconcileWindow) is
// unknown, and the batch is parked.
func (t *Target) reconcile(ctx context.Context, tr *track, cause error) target.Result {
	deadline := time.Now().Add(t.cfg.ReconcileWindow)
	var idleSince time.Time
	unknown := func(why string) target.Result {
		t.drop(tr)
		return target.Result{Outcome: command.AcceptanceUnknown, Reason: fmt.Sprintf("turn/start got no answer (%v) and %s", cause, why)}
	}
	for {
		c, err := tr.ep.Client(tr.instance)
		if err != nil {
			return unknown("the app-server instance is gone: continuity lost")
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		turns, lerr := listTurns(cctx, c, tr.thread)
		var th appserver.Thread
		var rerr error
		if lerr == nil {
			th, rerr = c.ThreadRead(cctx, appserver.ThreadReadParams{ThreadID: tr.thread})
		}
		cancel()
		if lerr == nil && rerr == nil {
			var found []appserver.Turn
			for _, turn := range turns {
				if carries(turn, tr.marker) {
					found = append(found, turn)
				}
			}
			switch {
			case len(found) == 1:
				end := ""
				if ev, terminal := canonical(appserver.NoteTurnCompleted, found[0].Status); terminal {
					end = ev
				}
				t.log.Info("turn/start proven accepted by its marker", "thread", tr.thread, "turn", found[0].ID)
				return t.accepted(tr, found[0].ID, end)
			case len(found) > 1:
				return unknown(fmt.Sprintf("%d turns carry its marker", len(found)))
			case th.Status.Type == appserver.ThreadIdle:
				if idleSince.IsZero() {
					idleSince = time.Now()
				} else if time.Since(idleSince) >= t.cfg.SettleDelay {
					t.drop(tr)
					return target.Result{Outcome: command.RejectedBefore,
						Reason: fmt.Sprintf("turn/start got no answer (%v); the thread stayed idle and no turn carries marker %s: not accepted", cause, tr.marker)}
				}
			default:
				idleSince = time.Time{}
			}
		}
		if time.Now().After(deadline) {
			return unknown("the thread's turns did not settle the question within the reconcile window")
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return unknown("the daemon is stopping")
		}
	}
}

// listTurns returns the thread's latest turns with their items, from
// thread/turns/list, or thread/read when the former is refused.
func listTurns(ctx context.Context, c *appserver.Client, thread string) ([]appserver.Turn, error) {
	r, err := c.TurnsList(ctx, appserver.TurnsListParams{ThreadID: thread, Limit: 20, SortDirection: "desc", ItemsView: "full"})
	if err == nil {
		return r.Data, nil
	}
	if _, answered := appserver.RPCCode(err); !answered {
		return nil, err
	}
	th, err := c.ThreadRead(ctx, appserver.ThreadReadParams{ThreadID: thread, IncludeTurns: true})
	return th.Turns, err
}

// carries reports whether one of turn's user messages holds marker.
func carries(turn appserver.Turn, marker string) bool {
	for _, it := range turn.Items {
		if bytes.Contains(it, []byte(`"userMessage"`)) && bytes.Contains(it, []byte(marker)) {
			return true
		}
	}
	return false
}

// prompt is the continuation the thread receives: the marker first (it
// proves which turn took the delivery if the answer is lost), the batch's
// summary, then each artifact: pasted when it is text within the inline
// limit, named otherwise.
func (t *Target) prompt(d command.Delivery) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] cbth: background job results for this conversation (batch %s, %s).\n\n%s\n",
		d.Marker, d.BatchID, plural.Count(len(d.JobIDs), "job", "jobs"), d.Summary)
	if len(d.ArtifactIDs) == 0 {
		return b.String(), nil
	}
	arts := map[string]*aggregate.Artifact{}
	if err := t.eng.Read(func(v engine.Snapshot) error {
		for _, id := range d.ArtifactIDs {
			a, err := engine.Artifact(v, id)
			if err != nil {
				return err
			}
			if a != nil {
				arts[id] = a
			}
		}
		return nil
	}); err != nil {
		return "", err
	}
	for _, id := range d.ArtifactIDs {
		a := arts[id]
		if a == nil {
			fmt.Fprintf(&b, "\nResult artifact %s is no longer available.\n", id)
			continue
		}
		if a.SizeBytes <= t.cfg.InlineLimit {
			data, err := artifact.ReadRegular(a.ManagedPath, "artifact "+id, t.cfg.InlineLimit)
			if err == nil && utf8.Valid(data) {
				fmt.Fprintf(&b, "\n--- result %s of job %s (%s, %s) ---\n%s", id, a.SourceJobID, a.ContentType, plural.Count(a.SizeBytes, "byte", "bytes"), data)
				if len(data) > 0 && data[len(data)-1] != '\n' {
					b.WriteByte('\n')
				}
				fmt.Fprintf(&b, "--- end of result %s ---\n", id)
				continue
			}
		}
		fmt.Fprintf(&b, "\nResult %s of job %s (%s, %s) is not pasted here; it is at %s\n", id, a.SourceJobID, a.ContentType, plural.Count(a.SizeBytes, "byte", "bytes"), a.ManagedPath)
	}
	return b.String(), nil
}
