// Package gateway is the channel gateway (spec/channels.md): the daemon
// serves it on $CBTH_HOME/run/gateway.sock, JSONL envelopes in and out.
// It validates every envelope, routes dialog messages by workspace_id +
// agent_id only (never by session_id) to a CortexFS agent's socket
// session or into a Codex thread through the delivery core, and records
// each envelope's metadata, never its payload, as events.
package gateway

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/adapters/gateway/envelope"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/aggregate"
	gatewaycmd "github.com/cbth-dev/cbth/engine/command/gateway"
	"github.com/cbth-dev/cbth/engine/query"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/sockfile"
)

// TargetGateway is the target of every envelope the gateway itself
// writes: the acknowledgement or refusal that ends its answer to one
// inbound line. A client reads until it sees one.
const TargetGateway = "gateway"

// Status codes of the gateway's acknowledgements.
const (
	StatusResumed = "resumed" // the answer to a resume request
	StatusResume  = "resume"  // a status envelope asking where the stream stands
)

// Status codes of an agent's run as the gateway forwards it (fromFrame).
const (
	StatusStarted = "started"
	StatusUsage   = "usage"
	StatusDone    = "done"
)

// Reason codes of refusals and failures.
const (
	ReasonNoRoute     = "no_route"     // no route for the routing key
	ReasonRoutingKey  = "routing_key"  // a dialog message without workspace_id and agent_id
	ReasonPayloadText = "payload_text" // a routed message's payload has no text
	ReasonMode        = "remote_mode"  // a downgrade without a reason code
	ReasonDestination = "destination"  // the destination failed
)

// Turn is one dialog message for a CortexFS socket session.
type Turn struct {
	// ID is the socket send's message id: derived from stream_id and
	// seq, so a re-route of the same envelope replays the run the socket
	// already has instead of starting another.
	ID      string
	Session string
	Input   string
}

// Agents runs turns on CortexFS socket sessions, keyed by socket path
// (agent/<name>.sock, model/<p>/<m>.sock): the socket protocol of
// spec/cortexfs.md.
type Agents interface {
	Turn(ctx context.Context, sock string, t Turn, frame func(stream.Event) error) error
}

// Delivery is a dialog message for a Codex thread.
type Delivery struct {
	ThreadID      string
	TargetKind    string
	StreamID      string
	Seq           uint64
	CorrelationID string
	Text          string
}

// Threads hands messages to the delivery core: a job whose result is
// the message, delivered into the thread by the core's rules.
type Threads interface {
	Deliver(ctx context.Context, d Delivery) (jobID string, err error)
}

// RemoteAck is another machine's gateway's last word on an envelope
// forwarded to it: its acknowledgement or its refusal.
type RemoteAck struct {
	// Outcome is the remote's: routed, recorded or duplicate; or refused
	// or failed, with Code, Reason and Message.
	Outcome string
	Code    errs.Code
	Reason  string
	Message string
}

// Remotes forwards envelopes to the gateways of other machines, by the
// name an ssh:NAME route gives (adapters/gateway/remote runs the user's
// OpenSSH client). line is the envelope as its client sent it; reply
// gets each envelope the remote's destination sends back, before the
// acknowledgement. A failure to reach the remote is an error with a
// stable code, and a reason code through Reason() string.
type Remotes interface {
	Forward(ctx context.Context, remote string, line []byte, in envelope.Envelope, reply func(envelope.Envelope) error) (RemoteAck, error)
}

// Gateway serves the gateway socket.
type Gateway struct {
	Eng     *engine.Engine
	CtxRoot string
	Agents  Agents
	Threads Threads
	// Remotes takes the envelopes of ssh:NAME routes (nil: such routes
	// fail with ENOTCONF).
	Remotes Remotes
	Now     func() time.Time
	Log     *slog.Logger
	// UID is the only peer user allowed to connect.
	UID int
	// TurnTimeout bounds one agent turn (default 10 minutes).
	TurnTimeout time.Duration
	// WriteTimeout bounds one write to a client (default 30 s): a client
	// that stops reading has its connection closed, with the reason
	// logged, rather than holding its stream and a goroutine for good.
	WriteTimeout time.Duration

	mu      sync.Mutex
	streams map[string]*streamLock
	conns   atomic.Int64
}

// streamLock serializes one stream's envelopes, so a resend racing its
// original is seen as the duplicate it is, and numbers what the gateway
// sends back on the stream.
type streamLock struct {
	mu     sync.Mutex
	out    uint64
	loaded bool
}

// Conns is the number of open client connections.
func (g *Gateway) Conns() int64 { return g.conns.Load() }

// Serve accepts connections until ctx ends.
func (g *Gateway) Serve(ctx context.Context, ln *sockfile.Listener) error {
	go func() { <-ctx.Done(); ln.Close() }()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		nc, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return errs.Wrap(errs.EINTERNAL, err, "gateway accept")
		}
		wg.Add(1)
		g.conns.Add(1)
		go func() {
			defer wg.Done()
			defer g.conns.Add(-1)
			g.serveConn(ctx, nc)
		}()
	}
}

// writer writes whole lines to one connection, each within timeout.
type writer struct {
	mu      sync.Mutex
	w       io.Writer
	timeout time.Duration
	// stalled is set once a write ran out of time: the connection is
	// closed, and the stream with it.
	stalled bool
}

func (w *writer) write(e envelope.Envelope) (int, []byte, error) {
	b, err := envelope.Encode(e)
	if err != nil {
		return 0, nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if d, ok := w.w.(interface{ SetWriteDeadline(time.Time) error }); ok && w.timeout > 0 {
		_ = d.SetWriteDeadline(time.Now().Add(w.timeout))
	}
	_, err = w.w.Write(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.stalled = true
		err = errs.Wrap(errs.ETIMEDOUT, err, "the client read nothing for %s", w.timeout)
	}
	return len(b), b, err
}

func (g *Gateway) writeTimeout() time.Duration {
	if g.WriteTimeout > 0 {
		return g.WriteTimeout
	}
	return 30 * time.Second
}

func (g *Gateway) serveConn(ctx context.Context, nc *net.UnixConn) {
	defer nc.Close()
	w := &writer{w: nc, timeout: g.writeTimeout()}
	defer func() {
		if w.stalled {
			// Nothing more can be said to a client that does not read:
			// the code goes to the log, and the connection is closed.
			g.Log.Warn("gateway client stopped reading: connection closed", "code", errs.ETIMEDOUT, "write_timeout", w.timeout)
		}
	}()
	if uid, err := sockfile.PeerUID(nc); err != nil || uid != g.UID {
		_, _, _ = w.write(g.rejection(nil, &envelope.Rejection{Code: errs.EACCES, Rule: "peer", Message: "permission denied"}))
		return
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	r := bufio.NewReaderSize(nc, envelope.MaxFrame+1)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Too large: skip the rest without holding it.
			n := len(line)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				n += len(line)
			}
			if _, _, werr := w.write(g.rejection(nil, &envelope.Rejection{Code: errs.EMSGSIZE, Rule: envelope.RuleFrameSize,
				Message: "frame over the 1 MiB limit"})); werr != nil || err != nil {
				return
			}
			continue
		}
		if err != nil && (len(line) == 0 || err != io.EOF) {
			return
		}
		frame := trimLine(line)
		if len(frame) > 0 {
			if g.handle(ctx, frame, w) != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func trimLine(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	return b
}

// handle answers one line: a rejection, or the destination's envelopes
// followed by the gateway's acknowledgement. Only a broken connection is
// an error.
func (g *Gateway) handle(ctx context.Context, line []byte, w *writer) error {
	env, err := envelope.Decode(line)
	if err != nil {
		var r *envelope.Rejection
		if !errors.As(err, &r) {
			r = &envelope.Rejection{Code: errs.CodeOf(err), Rule: "internal", Message: err.Error()}
		}
		_, _, werr := w.write(g.rejection(line, r))
		return werr
	}
	sl := g.lock(env.StreamID)
	defer g.unlock(env.StreamID, sl)
	return g.route(ctx, env, line, sl, w)
}

func (g *Gateway) lock(id string) *streamLock {
	g.mu.Lock()
	if g.streams == nil {
		g.streams = map[string]*streamLock{}
	}
	sl := g.streams[id]
	if sl == nil {
		sl = &streamLock{}
		g.streams[id] = sl
	}
	g.mu.Unlock()
	sl.mu.Lock()
	return sl
}

// unlock releases a stream. Its entry stays for the daemon's life: it
// holds the stream's outbound seq, which acknowledgements of duplicates
// advance without a record.
func (g *Gateway) unlock(_ string, sl *streamLock) { sl.mu.Unlock() }

// answer collects what goes back on a stream for one inbound envelope.
type answer struct {
	g    *Gateway
	w    *writer
	in   envelope.Envelope
	line []byte // in as its client wrote it: what an ssh route forwards
	// remote is the forwarded envelope's outcome at the remote gateway.
	remote string
	// msg says, for people, why a forward failed (never content).
	msg   string
	sl    *streamLock
	first uint64
	bytes int
	h     hash.Hash
}

// send writes one envelope back on the inbound stream with the stream's
// next outbound seq.
func (a *answer) send(e envelope.Envelope) error {
	a.sl.out++
	if a.first == 0 {
		a.first = a.sl.out
	}
	e.ChannelType, e.SessionID, e.StreamID, e.Seq = a.in.ChannelType, a.in.SessionID, a.in.StreamID, a.sl.out
	e.Timestamp, e.CorrelationID = a.g.now(), a.in.CorrelationID
	e.WorkspaceID, e.AgentID, e.MessageID = a.in.WorkspaceID, a.in.AgentID, a.in.MessageID
	if e.ChannelType == envelope.ChannelSSHRemote && e.RemoteMode == "" {
		e.RemoteMode = a.in.RemoteMode
	}
	n, b, err := a.w.write(e)
	a.bytes += n
	a.h.Write(b)
	return err
}

func (g *Gateway) now() time.Time {
	if g.Now == nil {
		return time.Now()
	}
	return g.Now()
}

func (g *Gateway) route(ctx context.Context, in envelope.Envelope, line []byte, sl *streamLock, w *writer) error {
	var st *aggregate.GatewayStream
	var rt *query.RouteView
	err := g.Eng.Read(func(s engine.Snapshot) error {
		var err error
		if st, err = query.GatewayStream(s, in.StreamID); err != nil {
			return err
		}
		if in.WorkspaceID != "" && in.AgentID != "" {
			rt, err = query.GatewayRoute(s, in.WorkspaceID, in.AgentID)
		}
		return err
	})
	if st == nil {
		st = &aggregate.GatewayStream{}
	}
	if !sl.loaded || sl.out < st.OutSeq {
		sl.out, sl.loaded = st.OutSeq, true
	}
	a := &answer{g: g, w: w, in: in, line: line, sl: sl, h: sha256.New()}
	if err != nil {
		return a.send(failure(in, errs.CodeOf(err), "", err.Error()))
	}
	if in.EventType == envelope.EventStatus && in.StatusCode == StatusResume {
		return a.send(resumed(in, st))
	}
	if st.Seen(in.Seq) || g.dedupSeen(in.DedupKey) {
		return a.send(ack(in, events.GatewayDuplicate, "", st))
	}
	rec := events.GatewayEnvelopeRecorded{ChannelType: in.ChannelType, SessionID: in.SessionID, Seq: in.Seq, Type: in.EventType,
		Target: in.Target, SentAt: in.Timestamp, WorkspaceID: in.WorkspaceID, AgentID: in.AgentID, MessageID: in.MessageID,
		DedupKey: in.DedupKey, RetryCount: in.RetryCount, RemoteMode: in.RemoteMode, StatusCode: in.StatusCode, ErrorCode: in.ErrorCode, ReasonCode: in.ReasonCode,
		PayloadBytes: len(in.Payload), PayloadSHA256: sha(in.Payload), Outcome: events.GatewayRecorded}
	if _, _, err := gatewaycmd.ModeAfter(st.RemoteMode, &rec); err != nil {
		rec.Outcome, rec.OutcomeCode, rec.OutcomeReason = events.GatewayRefused, string(errs.EINVAL), ReasonMode
	}
	text := ""
	switch {
	case rec.Outcome == events.GatewayRefused:
	case rt != nil && strings.HasPrefix(rt.To, gatewaycmd.RouteSSHPrefix):
		// Another machine's gateway takes every envelope of the key,
		// whatever its channel and event type, and decides for itself.
		rec.Route, rec.RouteKind = rt.To, rt.Target
	case in.EventType == envelope.EventMessage:
		switch {
		case in.WorkspaceID == "" || in.AgentID == "":
			rec.Outcome, rec.OutcomeCode, rec.OutcomeReason = events.GatewayRefused, string(errs.EINVAL), ReasonRoutingKey
		case rt == nil:
			rec.Outcome, rec.OutcomeCode, rec.OutcomeReason = events.GatewayRefused, string(errs.ENOENT), ReasonNoRoute
		default:
			rec.Route, rec.RouteKind = rt.To, rt.Target
			var ok bool
			if text, ok = payloadText(in.Payload); !ok {
				rec.Outcome, rec.OutcomeCode, rec.OutcomeReason = events.GatewayRefused, string(errs.EINVAL), ReasonPayloadText
			}
		}
	}
	if rec.Outcome != events.GatewayRefused && rec.Route != "" {
		g.deliver(ctx, a, rt, text, &rec)
	}
	if a.w == nil {
		return errBroken
	}
	// The acknowledgement is the last envelope of the answer; the record
	// names its seq too.
	rec.OutFirst, rec.OutLast = a.first, a.sl.out+1
	if rec.OutFirst == 0 {
		rec.OutFirst = rec.OutLast
	}
	meta := engine.Meta{Actor: events.ActorAdapter, CorrelationID: in.CorrelationID}
	if in.DedupKey != "" && rec.Outcome != events.GatewayRefused && rec.Outcome != events.GatewayFailed {
		meta.CommandID = dedupCommand(in.DedupKey)
	}
	// The ack's own bytes are not known before it is written, so the
	// record's size and hash cover what came before it.
	rec.OutBytes, rec.OutSHA256 = a.bytes, hex.EncodeToString(a.h.Sum(nil))
	res, err := g.Eng.Execute(context.WithoutCancel(ctx), meta, gatewaycmd.RecordEnvelope{StreamID: in.StreamID, Rec: rec})
	if err != nil {
		return a.send(failure(in, errs.CodeOf(err), "", "record: "+err.Error()))
	}
	if res.Replayed || res.Outcome == events.GatewayDuplicate {
		return a.send(ack(in, events.GatewayDuplicate, "", st))
	}
	_ = g.Eng.Read(func(s engine.Snapshot) error {
		if now, err := query.GatewayStream(s, in.StreamID); err == nil && now != nil {
			st = now
		}
		return nil
	})
	if rec.Outcome == events.GatewayRefused || rec.Outcome == events.GatewayFailed {
		f := failure(in, errs.Code(rec.OutcomeCode), rec.OutcomeReason, rec.Outcome)
		extra := map[string]any{"code": rec.OutcomeCode, "reason": rec.OutcomeReason}
		if a.remote != "" {
			extra["remote_outcome"] = a.remote
		}
		if a.msg != "" {
			extra["message"] = a.msg
		}
		f.ResumeCursor, f.Payload = strconv.FormatUint(st.Cursor(), 10), ackPayload(in, rec.Outcome, rec.JobID, st, extra)
		return a.send(f)
	}
	out := ack(in, rec.Outcome, rec.JobID, st)
	if a.remote != "" {
		out.Payload = ackPayload(in, rec.Outcome, rec.JobID, st, map[string]any{"remote_outcome": a.remote})
	}
	if rec.Seq > 0 && len(res.Events) > 1 {
		for _, e := range res.Events[1:] {
			if e.Type == (events.GatewayModeChanged{}).EventType() {
				var mc events.GatewayModeChanged
				_ = json.Unmarshal(e.Payload, &mc)
				out.RemoteMode, out.ReasonCode = mc.To, mc.ReasonCode
			}
		}
	}
	return a.send(out)
}

var errBroken = errors.New("connection broken")

// deliver hands a routed message to its destination and writes what
// comes back.
func (g *Gateway) deliver(ctx context.Context, a *answer, rt *query.RouteView, text string, rec *events.GatewayEnvelopeRecorded) {
	in := a.in
	switch {
	case strings.HasPrefix(rt.To, gatewaycmd.RouteCtxPrefix):
		rel := strings.TrimPrefix(rt.To, gatewaycmd.RouteCtxPrefix)
		sock := filepath.Join(g.CtxRoot, filepath.FromSlash(rel)) + ".sock"
		tctx, cancel := context.WithTimeout(ctx, g.turnTimeout())
		defer cancel()
		var werr error
		err := g.Agents.Turn(tctx, sock, Turn{ID: turnID(in.StreamID, in.Seq), Session: sessionName(in.WorkspaceID, in.AgentID), Input: text},
			func(ev stream.Event) error {
				e, ok := fromFrame(ev, rt.To)
				if !ok {
					return nil
				}
				if werr = a.send(e); werr != nil {
					return werr
				}
				return nil
			})
		switch {
		case werr != nil:
			a.w = nil // the client is gone; what it missed it resends
		case err != nil:
			rec.Outcome, rec.OutcomeCode, rec.OutcomeReason = events.GatewayFailed, string(errs.CodeOf(err)), ReasonDestination
			if g.Log != nil {
				g.Log.Warn("gateway: agent turn failed", "route", rt.To, "stream", in.StreamID, "seq", in.Seq, "err", err)
			}
		default:
			rec.Outcome = events.GatewayRouted
		}
	case strings.HasPrefix(rt.To, gatewaycmd.RouteSSHPrefix):
		g.forward(ctx, a, rt, rec)
	case strings.HasPrefix(rt.To, gatewaycmd.RouteThreadPrefix):
		id, err := g.Threads.Deliver(ctx, Delivery{ThreadID: strings.TrimPrefix(rt.To, gatewaycmd.RouteThreadPrefix), TargetKind: rt.Target,
			StreamID: in.StreamID, Seq: in.Seq, CorrelationID: in.CorrelationID, Text: text})
		if err != nil {
			rec.Outcome, rec.OutcomeCode, rec.OutcomeReason = events.GatewayFailed, string(errs.CodeOf(err)), ReasonDestination
			return
		}
		rec.Outcome, rec.JobID = events.GatewayRouted, id
	}
}

// forward hands an envelope to another machine's gateway and writes
// back what its destination answers. The remote's refusal or failure is
// this envelope's failure, with the remote's code and reason, so its seq
// stays unused here too and the client can send it again.
func (g *Gateway) forward(ctx context.Context, a *answer, rt *query.RouteView, rec *events.GatewayEnvelopeRecorded) {
	in := a.in
	if g.Remotes == nil {
		rec.Outcome, rec.OutcomeCode, rec.OutcomeReason = events.GatewayFailed, string(errs.ENOTCONF), ReasonDestination
		a.msg = rt.To + ": this gateway forwards to no remote"
		return
	}
	tctx, cancel := context.WithTimeout(ctx, g.turnTimeout())
	defer cancel()
	var werr error
	res, err := g.Remotes.Forward(tctx, strings.TrimPrefix(rt.To, gatewaycmd.RouteSSHPrefix), a.line, in, func(e envelope.Envelope) error {
		if werr == nil {
			werr = a.send(e)
		}
		return werr
	})
	switch {
	case werr != nil:
		a.w = nil // the client is gone; what it missed it resends
	case err != nil:
		reason := ReasonDestination
		var r interface{ Reason() string }
		if errors.As(err, &r) && r.Reason() != "" {
			reason = r.Reason()
		}
		rec.Outcome, rec.OutcomeCode, rec.OutcomeReason = events.GatewayFailed, string(errs.CodeOf(err)), reason
		a.msg = err.Error()
		if g.Log != nil {
			g.Log.Warn("gateway: forward to a remote failed", "route", rt.To, "stream", in.StreamID, "seq", in.Seq, "code", rec.OutcomeCode, "reason", reason, "err", err)
		}
	case res.Outcome == events.GatewayRefused || res.Outcome == events.GatewayFailed:
		rec.Outcome, rec.OutcomeCode, rec.OutcomeReason = events.GatewayFailed, string(res.Code), res.Reason
		a.remote, a.msg = res.Outcome, rt.To+": the remote gateway answered: "+res.Message
	default:
		rec.Outcome, a.remote = events.GatewayRouted, res.Outcome
	}
}

func (g *Gateway) turnTimeout() time.Duration {
	if g.TurnTimeout > 0 {
		return g.TurnTimeout
	}
	return 10 * time.Minute
}

func dedupCommand(key string) string { return "gateway.dedup/" + key }

func (g *Gateway) dedupSeen(key string) bool {
	if key == "" {
		return false
	}
	seen, _ := g.Eng.CommandSeen(dedupCommand(key))
	return seen
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// turnID is the socket message id of an envelope: 24 hex digits of the
// hash of its stream and seq.
func turnID(streamID string, seq uint64) string {
	h := sha256.New()
	h.Write([]byte(streamID))
	h.Write([]byte{0})
	var b [8]byte
	for i := range b {
		b[i] = byte(seq >> (8 * (7 - i)))
	}
	h.Write(b[:])
	return "gw-" + hex.EncodeToString(h.Sum(nil))[:24]
}

// sessionName is the socket session of a routing key: the routing key
// decides it, so a client's session_id never picks a conversation.
func sessionName(workspaceID, agentID string) string {
	return "gw-" + sha(append(append([]byte(workspaceID), 0), agentID...))[:24]
}

// payloadText reads the text a routed message carries.
func payloadText(p json.RawMessage) (string, bool) {
	var v struct {
		Text *string `json:"text"`
	}
	if json.Unmarshal(p, &v) != nil || v.Text == nil || *v.Text == "" {
		return "", false
	}
	return *v.Text, true
}
