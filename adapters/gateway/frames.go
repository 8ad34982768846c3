package gateway

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/adapters/gateway/envelope"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/internal/errs"
)

func raw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("{}")
	}
	return b
}

// fromFrame turns an agent's stream frame into a dialog event: start,
// usage and done become status, delta and message become message,
// tool_call and error keep their names. Reasoning is not forwarded.
func fromFrame(ev stream.Event, route string) (envelope.Envelope, bool) {
	e := envelope.Envelope{Target: route}
	switch ev.Type {
	case stream.TypeStart:
		e.EventType, e.StatusCode, e.Payload = envelope.EventStatus, StatusStarted, raw(map[string]any{"run": ev.Run, "model": ev.Model})
	case stream.TypeDelta:
		e.EventType, e.Payload = envelope.EventMessage, raw(map[string]any{"text": ev.Text, "delta": true})
	case stream.TypeMessage:
		var b strings.Builder
		for _, p := range ev.Content {
			b.WriteString(p.Text)
		}
		text := ev.Text
		if text == "" {
			text = b.String()
		}
		e.EventType, e.Payload = envelope.EventMessage, raw(map[string]any{"text": text, "role": "assistant"})
	case stream.TypeToolCall:
		e.EventType, e.Payload = envelope.EventToolCall, raw(map[string]any{"call_id": ev.CallID, "name": ev.Name, "arguments": ev.Arguments})
	case stream.TypeUsage:
		e.EventType, e.StatusCode, e.Payload = envelope.EventStatus, StatusUsage, raw(map[string]any{"input_tokens": ev.InputTokens, "output_tokens": ev.OutputTokens})
	case stream.TypeError:
		e.EventType, e.ErrorCode, e.Payload = envelope.EventError, string(ev.Code), raw(map[string]any{"code": ev.Code, "message": ev.Message})
	case stream.TypeDone:
		e.EventType, e.StatusCode, e.Payload = envelope.EventStatus, StatusDone, raw(map[string]any{"status": ev.Status})
	default:
		return e, false
	}
	return e, true
}

// ackPayload says where the stream stands after an inbound envelope.
func ackPayload(in envelope.Envelope, outcome, jobID string, st *aggregate.GatewayStream, extra ...map[string]any) json.RawMessage {
	m := map[string]any{"ack_seq": in.Seq, "outcome": outcome, "resume_cursor": strconv.FormatUint(st.Cursor(), 10), "high_seq": st.HighSeq}
	if jobID != "" {
		m["job_id"] = jobID
	}
	if len(st.Missing) > 0 {
		m["missing"] = st.Missing
	}
	for _, x := range extra {
		for k, v := range x {
			m[k] = v
		}
	}
	return raw(m)
}

// ack acknowledges an inbound envelope: routed, recorded or duplicate.
func ack(in envelope.Envelope, outcome, jobID string, st *aggregate.GatewayStream) envelope.Envelope {
	return envelope.Envelope{Target: TargetGateway, EventType: envelope.EventStatus, StatusCode: outcome,
		ResumeCursor: strconv.FormatUint(st.Cursor(), 10), Payload: ackPayload(in, outcome, jobID, st)}
}

// resumed answers a resume request with the stream's position.
func resumed(in envelope.Envelope, st *aggregate.GatewayStream) envelope.Envelope {
	e := ack(in, StatusResumed, "", st)
	e.Payload = raw(map[string]any{"resume_cursor": strconv.FormatUint(st.Cursor(), 10), "high_seq": st.HighSeq,
		"missing": append([]aggregate.SeqRange{}, st.Missing...), "out_seq": st.OutSeq})
	return e
}

// failure refuses a valid envelope or reports its destination's failure.
func failure(in envelope.Envelope, code errs.Code, reason, msg string) envelope.Envelope {
	return envelope.Envelope{Target: TargetGateway, EventType: envelope.EventError, ErrorCode: string(code), ReasonCode: reason,
		Payload: raw(map[string]any{"ack_seq": in.Seq, "code": code, "reason": reason, "message": msg})}
}

// rejection answers a line that is not a valid envelope, echoing the
// identifiers it could read so the client can match it.
func (g *Gateway) rejection(line []byte, r *envelope.Rejection) envelope.Envelope {
	var l struct {
		ChannelType   any `json:"channel_type"`
		SessionID     any `json:"session_id"`
		StreamID      any `json:"stream_id"`
		Seq           any `json:"seq"`
		CorrelationID any `json:"correlation_id"`
	}
	if len(line) <= envelope.MaxFrame {
		_ = json.Unmarshal(line, &l)
	}
	str := func(v any) string {
		s, _ := v.(string)
		if len(s) > envelope.MaxID {
			return ""
		}
		return s
	}
	e := envelope.Envelope{ChannelType: envelope.ChannelDialog, SessionID: str(l.SessionID), StreamID: str(l.StreamID),
		CorrelationID: str(l.CorrelationID), Target: TargetGateway, EventType: envelope.EventError, Timestamp: g.now(),
		ErrorCode: string(r.Code), ReasonCode: r.Rule, Payload: raw(r)}
	if c := str(l.ChannelType); c == envelope.ChannelSSHRemote {
		e.ChannelType = c
	}
	if f, ok := l.Seq.(float64); ok && f >= 1 && f <= 1<<53 && f == float64(uint64(f)) {
		e.Seq = uint64(f)
	}
	return e
}

// Refusal is the refusal of a line the gateway never read whole, such as
// one over the frame limit: what a relay in front of the gateway (cbth
// gateway serve --stdio) answers for a frame it does not pass on. It has
// no identifiers to echo.
func Refusal(now time.Time, r *envelope.Rejection) envelope.Envelope {
	return (&Gateway{Now: func() time.Time { return now }}).rejection(nil, r)
}
