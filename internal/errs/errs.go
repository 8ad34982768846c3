// Package errs defines cbth's error values: a stable code that clients
// switch on, a message for people, and the wrapped cause. Codes never change
// meaning; messages may.
package errs

import (
	"errors"
	"fmt"
	"syscall"
)

// Code is a stable error name. Clients compare codes, never messages.
type Code string

// The stable codes. Errno-style names where one fits.
const (
	EINVAL    Code = "EINVAL"    // bad argument or input
	ENOENT    Code = "ENOENT"    // no such job, batch, artifact, object
	EEXIST    Code = "EEXIST"    // already exists
	EACCES    Code = "EACCES"    // permission denied
	EMSGSIZE  Code = "EMSGSIZE"  // frame or message too large
	EFBIG     Code = "EFBIG"     // file over the configured size limit
	EHOSTDOWN Code = "EHOSTDOWN" // the daemon or a provider is unreachable
	EAGAIN    Code = "EAGAIN"    // try again later (rate limited, busy)
	EBUSY     Code = "EBUSY"     // a lease is held by someone else
	ETIMEDOUT Code = "ETIMEDOUT" // a bounded wait ran out
	ECONFLICT Code = "ECONFLICT" // expected stream version did not match
	ESTATE    Code = "ESTATE"    // the transition is illegal in the current state
	ESTALE    Code = "ESTALE"    // a fencing token no longer matches
	ENOTCONF  Code = "ENOTCONF"  // a provider or object is not configured
	ENOTSUP   Code = "ENOTSUP"   // a peer (the Codex app-server) lacks a capability cbth needs
	EVERSION  Code = "EVERSION"  // client and daemon protocol versions differ
	ECORRUPT  Code = "ECORRUPT"  // stored data failed verification
	ENOSPC    Code = "ENOSPC"    // the disk (or the user's quota) is full
	EINTERNAL Code = "EINTERNAL" // a bug or an unexpected failure
	ESANDBOX  Code = "ESANDBOX"  // a sandbox (Codex's) refused the connection to the daemon

	// The seed's refusals of a CLI managed session attach
	// (spec/codex-cli.md, "Managed sessions").
	SessionProfileMismatch         Code = "session_profile_mismatch"          // the requested profile differs and the old session cannot retire yet
	SessionPendingManualResolution Code = "session_pending_manual_resolution" // a manual batch of the thread waits for an operator

	// The seed's five non-success classes of Desktop
	// note-boundary-crossed (spec/desktop.md, "note-boundary-crossed").
	TransientNotReady          Code = "transient_not_ready"                 // not yet: the bridge may redeliver while the batch is automatic
	StaleOrSuperseded          Code = "stale_or_superseded"                 // the token is not the current head attempt
	AlreadyCrossed             Code = "already_crossed_or_handoff_recorded" // crossed before: operator recovery (cbth batch inspect --batch-id)
	BindingOrCapabilityInvalid Code = "binding_or_capability_invalid"       // the binding or installation may not continue automatically
	UnknownAfterHelperFailure  Code = "unknown_after_helper_failure"        // the helper failed after sending: reconcile durably first

	// A host-plugin enqueue named an app-server lease bound to another
	// thread than its source_thread_id (spec/plugin-target.md).
	LeaseThreadMismatch Code = "lease_thread_mismatch"

	// Refusals of the agent's MCP tools (spec/mcp.md).
	ThreadUnidentified Code = "thread_unidentified" // the call's metadata names no calling thread
	ThreadMismatch     Code = "thread_mismatch"     // the call names a job or thread of another thread
	TaskNotAllowed     Code = "task_not_allowed"    // task_run's command matches no [mcp] task_allow rule
)

// Exit codes of MISSION.md rule 10.
const (
	ExitOK          = 0
	ExitGeneric     = 1
	ExitUsage       = 2
	ExitPermission  = 13
	ExitUnavailable = 69
	ExitInternal    = 70
)

// ExitCode maps a code to the process exit status.
func (c Code) ExitCode() int {
	switch c {
	case "":
		return ExitOK
	case EINVAL, EMSGSIZE, EFBIG, ThreadUnidentified:
		return ExitUsage
	case EACCES, ThreadMismatch, TaskNotAllowed:
		return ExitPermission
	case EHOSTDOWN, EAGAIN, ENOTCONF, ENOTSUP, EVERSION, ENOSPC, ESANDBOX:
		return ExitUnavailable
	case EINTERNAL, ECORRUPT:
		return ExitInternal
	default:
		return ExitGeneric
	}
}

// Error is an error with a stable code.
type Error struct {
	Code    Code
	Message string
	Err     error
}

func (e *Error) Error() string {
	switch {
	case e.Err == nil:
		return e.Message
	case e.Message == "":
		return e.Err.Error()
	default:
		return e.Message + ": " + e.Err.Error()
	}
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches another *Error by code, so errors.Is(err, errs.New(ESTATE, ""))
// and the sentinel helpers below work through wrapping.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == "" && t.Err == nil
}

// New returns an error with a code and a formatted message.
func New(code Code, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap attaches a code and context to a cause.
func Wrap(code Code, err error, format string, args ...any) error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

// CodeOf returns the code of the outermost *Error in err's chain, or
// EINTERNAL when there is none. nil has no code.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// Sentinel returns a code-only error for errors.Is comparisons.
func Sentinel(code Code) error { return &Error{Code: code} }

// IO wraps a failed read or write of cbth's own files: ENOSPC when the
// disk or the quota is full (the user can act on that), EINTERNAL
// otherwise.
func IO(err error, format string, args ...any) error {
	code := EINTERNAL
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		code = ENOSPC
	}
	return Wrap(code, err, format, args...)
}
