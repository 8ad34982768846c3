package events

import "time"

// KindAppServer is the stream of one instance of the shared Codex app-server, by nonce.
const KindAppServer Kind = "appserver"

// appServerEvents declares the appserver events (see declarations).
func appServerEvents() []declaration {
	return []declaration{
		decl[AppServerStarted](KindAppServer),
		decl[AppServerExited](KindAppServer),
	}
}

// AppServerStarted records one instance of an app-server cbth delivers
// through, once it answered initialize, with what the capability probe
// proved of it: the daemon-owned shared app-server, or (Transport
// codex_daemon) the Codex daemon a plain `codex` runs, found by its
// socket. The stream id is the instance's nonce, one per process and
// daemon: cbth's restart makes a new one even for the same process.
type AppServerStarted struct {
	// Transport is "" for the shared app-server (every record before the
	// Codex daemon transport existed) and "codex_daemon" for the user's.
	Transport    string    `json:"transport,omitempty"`
	PID          int       `json:"pid"`
	StartedAt    time.Time `json:"started_at"`
	Nonce        string    `json:"nonce"`
	Socket       string    `json:"socket"`
	CodexBinary  string    `json:"codex_binary"`
	CodexHome    string    `json:"codex_home"`
	UserAgent    string    `json:"user_agent"`
	ProbePassed  bool      `json:"probe_passed"`
	ProbeCode    string    `json:"probe_code,omitempty"`
	ProbeMissing []string  `json:"probe_missing,omitempty"`
	Probe        RawJSON   `json:"probe,omitempty"`
}

const TypeAppServerStarted = "appserver.started"

func (AppServerStarted) EventType() string { return TypeAppServerStarted }

// AppServerExited records the end of an instance: it exited ("exited",
// with its exit status), the daemon stopped it ("stopped"), or a daemon
// starting found it recorded running by a daemon that is gone
// ("daemon_restarted").
type AppServerExited struct {
	Reason string `json:"reason"`
	Status string `json:"exit_status,omitempty"`
}

const TypeAppServerExited = "appserver.exited"

func (AppServerExited) EventType() string { return TypeAppServerExited }
