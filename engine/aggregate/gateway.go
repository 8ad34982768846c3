package aggregate

import (
	"github.com/cbth-dev/cbth/engine/fsm"
	"github.com/cbth-dev/cbth/events"
)

// GatewayRoute is where one routing key (workspace_id + agent_id) goes.
type GatewayRoute struct {
	Header[fsm.GatewayRouteState]
	WorkspaceID string `json:"workspace_id"`
	AgentID     string `json:"agent_id"`
	To          string `json:"to"`
	Target      string `json:"target"`
}

func (r *GatewayRoute) mutate(e *events.Envelope, p events.Payload) {
	if p, ok := p.(*events.GatewayRouteAdded); ok {
		r.WorkspaceID, r.AgentID, r.To, r.Target = p.WorkspaceID, p.AgentID, p.To, p.Target
	}
}

// SeqRange is an inclusive range of stream seqs.
type SeqRange struct {
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// MaxGaps bounds the open gaps a stream keeps: past it the oldest is
// given up (its seqs then count as received), so a client skipping seqs
// at random cannot grow the state without end.
const MaxGaps = 64

// GatewayStream is a channel stream's receiving side: the highest seq
// received, the gaps below it, the last seq the gateway sent back on it
// and, for ssh_remote, the remote mode.
type GatewayStream struct {
	Header[fsm.GatewayStreamState]
	ChannelType string     `json:"channel_type"`
	HighSeq     uint64     `json:"high_seq"`
	Missing     []SeqRange `json:"missing,omitempty"`
	OutSeq      uint64     `json:"out_seq"`
	RemoteMode  string     `json:"remote_mode,omitempty"`
	Received    int        `json:"received"`
	Routed      int        `json:"routed"`
}

// Seen reports whether seq was already received on the stream.
func (s *GatewayStream) Seen(seq uint64) bool {
	if seq > s.HighSeq {
		return false
	}
	for _, g := range s.Missing {
		if seq >= g.From && seq <= g.To {
			return false
		}
	}
	return true
}

// Cursor is the highest seq below which nothing is missing: where a
// reconnecting client resumes.
func (s *GatewayStream) Cursor() uint64 {
	if len(s.Missing) > 0 {
		return s.Missing[0].From - 1
	}
	return s.HighSeq
}

func (s *GatewayStream) mutate(e *events.Envelope, p events.Payload) {
	switch p := p.(type) {
	case *events.GatewayEnvelopeRecorded:
		if s.ChannelType == "" {
			s.ChannelType = p.ChannelType
		}
		s.OutSeq = max(s.OutSeq, p.OutLast)
		if p.Outcome == events.GatewayRefused || p.Outcome == events.GatewayFailed {
			return // its seq stays unused: the client may send it again
		}
		s.Received++
		if p.Outcome == events.GatewayRouted {
			s.Routed++
		}
		switch {
		case p.Seq > s.HighSeq:
			if p.Seq > s.HighSeq+1 {
				s.Missing = append(s.Missing, SeqRange{s.HighSeq + 1, p.Seq - 1})
				if len(s.Missing) > MaxGaps {
					s.Missing = append([]SeqRange(nil), s.Missing[len(s.Missing)-MaxGaps:]...)
				}
			}
			s.HighSeq = p.Seq
		default:
			s.Missing = fill(s.Missing, p.Seq)
		}
	case *events.GatewayModeChanged:
		s.RemoteMode = p.To
	}
}

// fill takes seq out of the gaps, splitting the one it falls in.
func fill(gaps []SeqRange, seq uint64) []SeqRange {
	out := make([]SeqRange, 0, len(gaps)+1)
	for _, g := range gaps {
		if seq < g.From || seq > g.To {
			out = append(out, g)
			continue
		}
		if g.From < seq {
			out = append(out, SeqRange{g.From, seq - 1})
		}
		if seq < g.To {
			out = append(out, SeqRange{seq + 1, g.To})
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
