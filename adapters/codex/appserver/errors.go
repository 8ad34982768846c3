package appserver

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cbth-dev/cbth/internal/errs"
)

// JSON-RPC error codes the app-server answers with. Codex 0.169 answers
// -32600 both for requests it cannot read (a missing field, an unknown
// method) and for requests the thread's state refuses (no rollout yet, not
// loaded, another process writes it, a wrong expected turn); -32001 means
// it is overloaded and the request may be retried.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	CodeOverloaded     = -32001
)

// RPCError is an error answer from the app-server: proof that it received
// the request and refused it.
type RPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *RPCError) Error() string { return fmt.Sprintf("%s (JSON-RPC %d)", e.Message, e.Code) }

// UnmarshalJSON requires the code: an error without one proves nothing.
func (e *RPCError) UnmarshalJSON(b []byte) error {
	var w struct {
		Code    *int            `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Code == nil {
		return errors.New("error without a code")
	}
	*e = RPCError{Code: *w.Code, Message: w.Message, Data: w.Data}
	return nil
}

// RPCCode returns the JSON-RPC code when err is (or wraps) an error answer.
// ok is false for every other failure: no answer came (a timeout, a lost
// connection), so whether the request took effect is unknown.
func RPCCode(err error) (code int, ok bool) {
	var e *RPCError
	if errors.As(err, &e) {
		return e.Code, true
	}
	return 0, false
}

// answerError wraps an error answer with a cbth code by class.
func answerError(method string, e *RPCError) error {
	code := errs.EINTERNAL
	switch e.Code {
	case CodeOverloaded:
		code = errs.EAGAIN
	case CodeMethodNotFound:
		code = errs.ENOTSUP
	case CodeInvalidRequest:
		code = errs.ESTATE
	case CodeInvalidParams, CodeParseError:
		code = errs.EINVAL
	}
	return errs.Wrap(code, e, "codex app-server refused %s", method)
}

// ErrClosed is wrapped by every error of a call on a connection that is
// gone; Client.Err says why it went.
var ErrClosed = errors.New("codex app-server connection closed")

// ErrOverflow ends a subscription whose reader fell so far behind that a
// message would have been dropped; the subscriber has lost continuity.
var ErrOverflow = errors.New("subscriber fell behind")
