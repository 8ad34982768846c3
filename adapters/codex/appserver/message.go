package appserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Kind tells the three JSON-RPC messages a peer sends apart.
type Kind int

// The kinds of message.
const (
	KindResponse     Kind = iota + 1 // an answer to a request: id and result or error
	KindNotification                 // method, no id
	KindRequest                      // method and id: the peer asks and waits
)

func (k Kind) String() string {
	switch k {
	case KindResponse:
		return "response"
	case KindNotification:
		return "notification"
	case KindRequest:
		return "request"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// ID is a JSON-RPC request id: an integer or a string. The app-server
// numbers its own requests (approvals) from 0; cbth's requests count up
// from 1. The zero ID is the integer 0.
type ID struct {
	num   int64
	str   string
	isStr bool
}

// IntID and StringID make ids.
func IntID(n int64) ID           { return ID{num: n} }
func StringID(s string) ID       { return ID{str: s, isStr: true} }
func (id ID) Int() (int64, bool) { return id.num, !id.isStr }

// String is the id as JSON text: 7 or "abc".
func (id ID) String() string {
	if id.isStr {
		return strconv.Quote(id.str)
	}
	return strconv.FormatInt(id.num, 10)
}

// MarshalJSON writes the id as it came.
func (id ID) MarshalJSON() ([]byte, error) {
	if id.isStr {
		return json.Marshal(id.str)
	}
	return strconv.AppendInt(nil, id.num, 10), nil
}

// UnmarshalJSON accepts an integer that fits int64, or a string.
func (id *ID) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*id = StringID(s)
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("id %s is neither a string nor an integer", clip(b))
	}
	*id = IntID(n)
	return nil
}

// Message is one decoded JSON-RPC message.
type Message struct {
	Kind   Kind
	ID     ID              // requests and responses
	Method string          // requests and notifications
	Params json.RawMessage // requests and notifications; nil when absent
	Result json.RawMessage // successful responses
	Error  *RPCError       // failed responses
}

// ErrMalformed is wrapped by every Decode error.
var ErrMalformed = errors.New("malformed JSON-RPC message")

// wire is the union of every member a message may have. Raw members tell
// absent (nil) from null ("null").
type wire struct {
	JSONRPC *string         `json:"jsonrpc,omitempty"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  *string         `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

// Decode reads one message. The app-server omits "jsonrpc"; when present
// it must be "2.0". A message with a method is a request when it has an id
// and a notification otherwise; a message without one is a response and
// needs an id and exactly one of result and error. Members Codex adds
// (emittedAtMs) are ignored.
func Decode(b []byte) (Message, error) {
	var w wire
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return Message{}, fmt.Errorf("%w: not a JSON object: %s", ErrMalformed, clip(b))
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if w.JSONRPC != nil && *w.JSONRPC != "2.0" {
		return Message{}, fmt.Errorf("%w: jsonrpc %q", ErrMalformed, *w.JSONRPC)
	}
	var m Message
	hasID := w.ID != nil && !isNull(w.ID)
	if hasID {
		if err := m.ID.UnmarshalJSON(w.ID); err != nil {
			return Message{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}
	if w.Method != nil {
		if *w.Method == "" {
			return Message{}, fmt.Errorf("%w: empty method", ErrMalformed)
		}
		if w.Result != nil || w.Error != nil {
			return Message{}, fmt.Errorf("%w: %s carries a result or an error", ErrMalformed, *w.Method)
		}
		if isNull(w.Params) {
			w.Params = nil
		}
		if w.Params != nil && !isObjectOrArray(w.Params) {
			return Message{}, fmt.Errorf("%w: %s params are neither an object nor an array", ErrMalformed, *w.Method)
		}
		m.Method, m.Params = *w.Method, w.Params
		m.Kind = KindNotification
		if hasID {
			m.Kind = KindRequest
		}
		return m, nil
	}
	m.Kind = KindResponse
	switch {
	case !hasID:
		// A null id answers a request the peer could not read; nothing
		// waits on it, so it is reported as malformed rather than matched.
		return Message{}, fmt.Errorf("%w: a response without an id", ErrMalformed)
	case (w.Result == nil) == (w.Error == nil):
		return Message{}, fmt.Errorf("%w: response %s needs exactly one of result and error", ErrMalformed, m.ID)
	case w.Error != nil:
		var e RPCError
		if err := json.Unmarshal(w.Error, &e); err != nil || isNull(w.Error) {
			return Message{}, fmt.Errorf("%w: response %s: error is not {code, message}", ErrMalformed, m.ID)
		}
		m.Error = &e
	default:
		m.Result = w.Result
	}
	return m, nil
}

// Encode writes m in the form Decode reads back (with "jsonrpc":"2.0").
func Encode(m Message) ([]byte, error) {
	v := "2.0"
	w := wire{JSONRPC: &v}
	switch m.Kind {
	case KindRequest, KindNotification:
		if m.Method == "" {
			return nil, errors.New("appserver: a request or notification needs a method")
		}
		w.Method, w.Params = &m.Method, m.Params
	case KindResponse:
		if m.Error != nil {
			raw, err := json.Marshal(m.Error)
			if err != nil {
				return nil, err
			}
			w.Error = raw
		} else {
			w.Result = m.Result
			if w.Result == nil {
				w.Result = json.RawMessage("null")
			}
		}
	default:
		return nil, fmt.Errorf("appserver: cannot encode a message of kind %v", m.Kind)
	}
	if m.Kind != KindNotification {
		id, _ := m.ID.MarshalJSON()
		w.ID = id
	}
	return json.Marshal(w)
}

func isNull(b json.RawMessage) bool { return string(bytes.TrimSpace(b)) == "null" }

func isObjectOrArray(b json.RawMessage) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

// clip keeps error messages short when a peer sends something huge.
func clip(b []byte) string {
	const n = 120
	if len(b) > n {
		return strconv.Quote(string(b[:n])) + "..."
	}
	return strconv.Quote(string(b))
}
