// Package envelope is the channel contract v0 envelope (spec/channels.md):
// the Go type every dialog and ssh_remote message or event travels in,
// and its strict decoder. A rejection names the field and the rule that
// failed, with a stable code; unknown fields are ignored.
package envelope

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/internal/errs"
)

// The two top-level channels; there are no others.
const (
	ChannelDialog    = "dialog"
	ChannelSSHRemote = "ssh_remote"
)

// The remote modes of an ssh_remote channel.
const (
	ModeIDEPrimary       = "ide_primary"
	ModeTerminalFallback = "terminal_fallback"
)

// The event types, fixed in v0.
const (
	EventMessage  = "message"
	EventToolCall = "tool_call"
	EventStatus   = "status"
	EventError    = "error"
)

// MaxFrame bounds one envelope line, newline excluded: the same 1 MiB as
// a model socket frame (spec/cortexfs.md).
const MaxFrame = 1 << 20

// MaxID bounds every identifier and code field, in bytes.
const MaxID = 256

// Envelope is one channel message or event.
type Envelope struct {
	ChannelType   string          `json:"channel_type"`
	SessionID     string          `json:"session_id"`
	StreamID      string          `json:"stream_id"`
	Seq           uint64          `json:"seq"`
	Timestamp     time.Time       `json:"timestamp"`
	CorrelationID string          `json:"correlation_id"`
	Target        string          `json:"target"`
	EventType     string          `json:"event_type"`
	Payload       json.RawMessage `json:"payload"`

	WorkspaceID  string `json:"workspace_id,omitempty"`
	AgentID      string `json:"agent_id,omitempty"`
	MessageID    string `json:"message_id,omitempty"`
	DedupKey     string `json:"dedup_key,omitempty"`
	ResumeCursor string `json:"resume_cursor,omitempty"`
	StatusCode   string `json:"status_code,omitempty"`
	ErrorCode    string `json:"error_code,omitempty"`
	RetryCount   int    `json:"retry_count,omitempty"`
	// RemoteMode is an ssh_remote channel's mode. The contract's example
	// carries it in the payload; either place is accepted, and the
	// decoder copies it here.
	RemoteMode string `json:"remote_mode,omitempty"`
	// ReasonCode says why a mode changed (a downgrade to
	// terminal_fallback) or why the gateway refused something.
	ReasonCode string `json:"reason_code,omitempty"`
}

// Rules a rejection names. They are stable: clients switch on them.
const (
	RuleFrameSize  = "frame_size"  // the line is over MaxFrame (EMSGSIZE)
	RuleUTF8       = "utf8"        // the line is not valid UTF-8
	RuleJSON       = "json"        // the line is not one JSON object
	RuleRequired   = "required"    // a required field is missing or null
	RuleType       = "type"        // a field has the wrong JSON type
	RuleEmpty      = "empty"       // a required string is empty
	RuleLength     = "length"      // a string is over MaxID bytes
	RuleEnum       = "enum"        // a value outside its fixed set
	RuleRange      = "range"       // a number out of range
	RuleFormat     = "format"      // a timestamp that is not RFC 3339
	RuleConflict   = "conflict"    // remote_mode given twice, differently
	RuleNotAllowed = "not_allowed" // a field the channel does not have
)

// Rejection is a refused envelope: the field, the rule and the stable
// code (EINVAL, or EMSGSIZE for an oversized frame).
type Rejection struct {
	Code    errs.Code `json:"code"`
	Field   string    `json:"field,omitempty"`
	Rule    string    `json:"rule"`
	Message string    `json:"message"`
}

func (r *Rejection) Error() string { return r.Message }

// Unwrap gives errs.CodeOf the rejection's code.
func (r *Rejection) Unwrap() error { return &errs.Error{Code: r.Code, Message: r.Message} }

func reject(field, rule, msg string) *Rejection {
	return &Rejection{Code: errs.EINVAL, Field: field, Rule: rule, Message: field + ": " + msg}
}

// Decode parses and validates one envelope line (without its newline).
// Fields are checked in the contract's order, so the rejection names the
// first field that fails.
func Decode(line []byte) (Envelope, error) {
	var e Envelope
	if len(line) > MaxFrame {
		return e, &Rejection{Code: errs.EMSGSIZE, Rule: RuleFrameSize, Message: "frame of " + strconv.Itoa(len(line)) + " bytes is over the 1 MiB limit"}
	}
	if !utf8.Valid(line) {
		// encoding/json would turn each bad byte into U+FFFD: two
		// different ids could become one.
		return e, &Rejection{Code: errs.EINVAL, Rule: RuleUTF8, Message: "the frame is not valid UTF-8"}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil || m == nil {
		return e, &Rejection{Code: errs.EINVAL, Rule: RuleJSON, Message: "the frame is not one JSON object"}
	}
	var err error
	str := func(name string, required bool, dst *string) bool {
		if err != nil {
			return false
		}
		*dst, err = stringField(m, name, required)
		return err == nil
	}
	str("channel_type", true, &e.ChannelType)
	if err == nil && e.ChannelType != ChannelDialog && e.ChannelType != ChannelSSHRemote {
		err = reject("channel_type", RuleEnum, "must be dialog or ssh_remote")
	}
	str("session_id", true, &e.SessionID)
	str("stream_id", true, &e.StreamID)
	if err == nil {
		e.Seq, err = seqField(m)
	}
	if err == nil {
		e.Timestamp, err = timeField(m)
	}
	str("correlation_id", true, &e.CorrelationID)
	str("target", true, &e.Target)
	str("event_type", true, &e.EventType)
	if err == nil {
		switch e.EventType {
		case EventMessage, EventToolCall, EventStatus, EventError:
		default:
			err = reject("event_type", RuleEnum, "must be message, tool_call, status or error")
		}
	}
	if err == nil {
		e.Payload, err = payloadField(m)
	}
	str("workspace_id", false, &e.WorkspaceID)
	str("agent_id", false, &e.AgentID)
	str("message_id", false, &e.MessageID)
	str("dedup_key", false, &e.DedupKey)
	str("resume_cursor", false, &e.ResumeCursor)
	str("status_code", false, &e.StatusCode)
	str("error_code", false, &e.ErrorCode)
	str("reason_code", false, &e.ReasonCode)
	if err == nil {
		e.RetryCount, err = retryField(m)
	}
	if err == nil {
		e.RemoteMode, err = remoteMode(m, e.ChannelType, e.Payload)
	}
	if err != nil {
		return Envelope{}, err
	}
	return e, nil
}

func stringField(m map[string]json.RawMessage, name string, required bool) (string, error) {
	raw, ok := m[name]
	if !ok || isNull(raw) {
		if required {
			return "", reject(name, RuleRequired, "is required")
		}
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", reject(name, RuleType, "must be a string")
	}
	if s == "" && required {
		return "", reject(name, RuleEmpty, "must not be empty")
	}
	if len(s) > MaxID {
		return "", reject(name, RuleLength, "is over "+strconv.Itoa(MaxID)+" bytes")
	}
	return s, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// seqField reads seq: an integer from 1 to 2^53 (what every JSON reader
// holds exactly).
func seqField(m map[string]json.RawMessage) (uint64, error) {
	raw, ok := m["seq"]
	if !ok || isNull(raw) {
		return 0, reject("seq", RuleRequired, "is required")
	}
	n, err := intOf(raw)
	if err != nil {
		return 0, reject("seq", RuleType, "must be an integer")
	}
	if n < 1 || n > 1<<53 {
		return 0, reject("seq", RuleRange, "must be from 1 to 2^53")
	}
	return uint64(n), nil
}

func retryField(m map[string]json.RawMessage) (int, error) {
	raw, ok := m["retry_count"]
	if !ok || isNull(raw) {
		return 0, nil
	}
	n, err := intOf(raw)
	if err != nil {
		return 0, reject("retry_count", RuleType, "must be an integer")
	}
	if n < 0 || n > 1<<31-1 {
		return 0, reject("retry_count", RuleRange, "must be from 0 to 2^31-1")
	}
	return int(n), nil
}

func intOf(raw json.RawMessage) (int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		// json.Number would take a quoted "1" too.
		return 0, strconv.ErrSyntax
	}
	var num json.Number
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&num); err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(num), 10, 64)
}

func timeField(m map[string]json.RawMessage) (time.Time, error) {
	raw, ok := m["timestamp"]
	if !ok || isNull(raw) {
		return time.Time{}, reject("timestamp", RuleRequired, "is required")
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return time.Time{}, reject("timestamp", RuleType, "must be a string")
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || len(s) > 64 {
		return time.Time{}, reject("timestamp", RuleFormat, "must be an RFC 3339 time")
	}
	return t, nil
}

// payloadField reads the payload: a JSON object. Its content is the
// channel's and is never stored (metadata-only persistence).
func payloadField(m map[string]json.RawMessage) (json.RawMessage, error) {
	raw, ok := m["payload"]
	if !ok || isNull(raw) {
		return nil, reject("payload", RuleRequired, "is required")
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, reject("payload", RuleType, "must be a JSON object")
	}
	return raw, nil
}

// remoteMode reads remote_mode from the envelope or its payload: required
// on ssh_remote, one of its two modes, not allowed on dialog.
func remoteMode(m map[string]json.RawMessage, channel string, payload json.RawMessage) (string, error) {
	top, err := stringField(m, "remote_mode", false)
	if err != nil {
		return "", err
	}
	var p struct {
		RemoteMode json.RawMessage `json:"remote_mode"`
	}
	_ = json.Unmarshal(payload, &p) // payloadField checked it is an object
	inner := ""
	if len(p.RemoteMode) > 0 && !isNull(p.RemoteMode) {
		if json.Unmarshal(p.RemoteMode, &inner) != nil {
			return "", reject("payload.remote_mode", RuleType, "must be a string")
		}
	}
	if channel == ChannelDialog {
		if top != "" || inner != "" {
			return "", reject("remote_mode", RuleNotAllowed, "only an ssh_remote channel has a remote mode")
		}
		return "", nil
	}
	if top != "" && inner != "" && top != inner {
		return "", reject("remote_mode", RuleConflict, "differs from payload.remote_mode")
	}
	mode := top
	if mode == "" {
		mode = inner
	}
	switch mode {
	case "":
		return "", reject("remote_mode", RuleRequired, "is required on ssh_remote (in the envelope or its payload)")
	case ModeIDEPrimary, ModeTerminalFallback:
		return mode, nil
	}
	return "", reject("remote_mode", RuleEnum, "must be ide_primary or terminal_fallback")
}

// Encode renders an envelope as one JSONL line, newline included. The
// timestamp is in UTC with the precision it has.
func Encode(e Envelope) ([]byte, error) {
	e.Timestamp = e.Timestamp.UTC()
	if len(e.Payload) == 0 {
		e.Payload = json.RawMessage("{}")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, errs.Wrap(errs.EINTERNAL, err, "encode envelope")
	}
	return buf.Bytes(), nil
}
