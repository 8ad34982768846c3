package remote

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/gateway"
	"github.com/cbth-dev/cbth/adapters/gateway/envelope"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Attempts bounds the links one envelope is tried on: the first, and two
// more after a link that dropped under it.
const Attempts = 3

// Forwarder is the local end: gateway.Remotes over ssh links, kept open
// between envelopes (up to each remote's idle_timeout) so that a stream
// does not pay an ssh connection per envelope.
type Forwarder struct {
	// Remote reads a remote's table ([gateway.remotes.NAME]) when a link
	// to it starts, so that a change to config.toml applies to the next
	// link without a restart.
	Remote func(name string) (home.GatewayRemote, error)
	// Version is this cbth's version, for the hello.
	Version string
	Log     *slog.Logger
	// Now stamps the resume requests (default time.Now).
	Now func() time.Time

	mu      sync.Mutex
	idle    map[string][]*Link
	stopped bool
}

var _ gateway.Remotes = (*Forwarder)(nil)

// Forward implements gateway.Remotes: at least once, with the remote's
// idempotency. When a link drops under an envelope, the next link first
// asks the remote where the stream stands (a resume request): an
// envelope the remote has already is not sent again and counts as its
// duplicate; one it lacks is sent again.
func (f *Forwarder) Forward(ctx context.Context, name string, line []byte, in envelope.Envelope, reply func(envelope.Envelope) error) (gateway.RemoteAck, error) {
	cfg, err := f.Remote(name)
	if err != nil {
		return gateway.RemoteAck{}, err
	}
	var last error
	for attempt := 0; attempt < Attempts; attempt++ {
		l, err := f.get(ctx, name, cfg)
		if err != nil {
			// Reaching the host failed: another try now would fail
			// alike. The client sends the envelope again later.
			return gateway.RemoteAck{}, err
		}
		if attempt > 0 {
			has, err := l.has(ctx, in, f.now())
			if err != nil {
				f.discard(l)
				if last = err; retry(err) {
					continue
				}
				return gateway.RemoteAck{}, err
			}
			if has {
				f.put(l)
				f.log().Info("gateway: the remote had the envelope the dropped link carried", "remote", name, "stream", in.StreamID, "seq", in.Seq)
				return gateway.RemoteAck{Outcome: events.GatewayDuplicate}, nil
			}
			f.log().Info("gateway: sending again what the dropped link carried", "remote", name, "stream", in.StreamID, "seq", in.Seq)
		}
		ack, err := l.forward(ctx, line, reply)
		if err != nil && ack.Target == "" {
			f.discard(l)
			if last = err; retry(err) {
				continue
			}
			return gateway.RemoteAck{}, err
		}
		f.put(l)
		// err here is reply's: the remote answered whole, the local
		// client is gone.
		return ackOf(ack), err
	}
	return gateway.RemoteAck{}, last
}

// retry says whether an envelope may go on another link: only when the
// link dropped under it.
func retry(err error) bool {
	var f *Fault
	return errors.As(err, &f) && f.ReasonCode == ReasonLinkDropped
}

// has asks the remote whether it received in already: a resume request on
// in's stream (answered, never recorded).
func (l *Link) has(ctx context.Context, in envelope.Envelope, now time.Time) (bool, error) {
	q := envelope.Envelope{ChannelType: in.ChannelType, SessionID: in.SessionID, StreamID: in.StreamID, Seq: in.Seq, Timestamp: now,
		CorrelationID: in.CorrelationID, Target: in.Target, EventType: envelope.EventStatus, StatusCode: gateway.StatusResume,
		WorkspaceID: in.WorkspaceID, AgentID: in.AgentID, RemoteMode: in.RemoteMode, Payload: json.RawMessage("{}")}
	b, err := envelope.Encode(q)
	if err != nil {
		return false, err
	}
	ack, err := l.forward(ctx, trimNL(b), func(envelope.Envelope) error { return nil })
	if err != nil {
		return false, err
	}
	if ack.StatusCode != gateway.StatusResumed {
		return false, fault(errs.ENOTSUP, ReasonProtocol, "ssh:%s: the remote answered a resume request with %s %s", l.name, ack.EventType, ack.StatusCode)
	}
	var st struct {
		Cursor  string               `json:"resume_cursor"`
		HighSeq uint64               `json:"high_seq"`
		Missing []aggregate.SeqRange `json:"missing"`
	}
	if err := json.Unmarshal(ack.Payload, &st); err != nil {
		return false, fault(errs.ENOTSUP, ReasonProtocol, "ssh:%s: the remote's resume answer: %v", l.name, err)
	}
	cur, _ := strconv.ParseUint(st.Cursor, 10, 64)
	if in.Seq <= cur {
		return true, nil
	}
	s := aggregate.GatewayStream{HighSeq: st.HighSeq, Missing: st.Missing}
	return s.Seen(in.Seq), nil
}

// ackOf reads the remote gateway's last word on an envelope.
func ackOf(e envelope.Envelope) gateway.RemoteAck {
	if e.EventType == envelope.EventStatus {
		return gateway.RemoteAck{Outcome: e.StatusCode}
	}
	var p struct {
		Outcome string `json:"outcome"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(e.Payload, &p)
	if p.Outcome == "" {
		p.Outcome = events.GatewayRefused // a refusal of the line itself
	}
	return gateway.RemoteAck{Outcome: p.Outcome, Code: errs.Code(e.ErrorCode), Reason: e.ReasonCode, Message: p.Message}
}

// get takes an idle link to the remote, or dials one.
func (f *Forwarder) get(ctx context.Context, name string, cfg home.GatewayRemote) (*Link, error) {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil, fault(errs.EHOSTDOWN, ReasonStopping, "ssh:%s: the gateway is stopping", name)
	}
	for n := len(f.idle[name]); n > 0; n = len(f.idle[name]) {
		l := f.idle[name][n-1]
		f.idle[name] = f.idle[name][:n-1]
		if l.alive() && reflect.DeepEqual(l.cfg, cfg) {
			f.mu.Unlock()
			return l, nil
		}
		f.closeLater(l) // dead, or dialed with a table that has changed since
	}
	f.mu.Unlock()
	return Dial(ctx, name, cfg, f.Version)
}

// put gives a link back for the next envelope.
func (f *Forwarder) put(l *Link) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped || !l.alive() {
		f.closeLater(l)
		return
	}
	if f.idle == nil {
		f.idle = map[string][]*Link{}
	}
	l.idleSince = f.now()
	f.idle[l.name] = append(f.idle[l.name], l)
}

// discard ends a link that failed.
func (f *Forwarder) discard(l *Link) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeLater(l)
}

// closeLater closes a link without holding up the caller. Should the
// daemon exit first, the kernel closes ssh's stdin with it, which ends
// the link the same way.
func (f *Forwarder) closeLater(l *Link) { go l.Close() }

// Sweep closes the links idle past their remote's idle_timeout.
func (f *Forwarder) Sweep() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	for name, ls := range f.idle {
		keep := ls[:0]
		for _, l := range ls {
			if !l.alive() || now.Sub(l.idleSince) >= l.cfg.IdleTimeout.Duration {
				f.closeLater(l)
				continue
			}
			keep = append(keep, l)
		}
		f.idle[name] = keep
	}
}

// Links is the number of idle links.
func (f *Forwarder) Links() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, ls := range f.idle {
		n += len(ls)
	}
	return n
}

// Stop closes every idle link and refuses new ones; it returns once
// they are gone. A link in use is closed when its envelope is done (the
// daemon's stop ends its wait).
func (f *Forwarder) Stop() {
	f.mu.Lock()
	f.stopped = true
	var idle []*Link
	for _, ls := range f.idle {
		idle = append(idle, ls...)
	}
	f.idle = nil
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range idle {
		wg.Go(l.Close)
	}
	wg.Wait()
}

func (f *Forwarder) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f *Forwarder) log() *slog.Logger {
	if f.Log != nil {
		return f.Log
	}
	return slog.New(slog.DiscardHandler)
}
