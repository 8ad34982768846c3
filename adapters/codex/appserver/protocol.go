package appserver

import (
	"context"
	"encoding/json"
)

// The shapes below are the subset of Codex 0.169's app-server protocol cbth
// relies on, as spec/codex-cli.md describes them. Unknown members are
// ignored, so later Codex versions may add to them.

// Methods cbth calls.
const (
	MethodInitialize      = "initialize"
	MethodInitialized     = "initialized" // a notification
	MethodThreadStart     = "thread/start"
	MethodThreadResume    = "thread/resume"
	MethodThreadRead      = "thread/read"
	MethodThreadLoaded    = "thread/loaded/list"
	MethodThreadTurnsList = "thread/turns/list"
	MethodTurnStart       = "turn/start"
	MethodTurnSteer       = "turn/steer"
	MethodTurnInterrupt   = "turn/interrupt"
)

// Notifications cbth reads.
const (
	NoteThreadStarted         = "thread/started"
	NoteThreadStatusChanged   = "thread/status/changed"
	NoteThreadClosed          = "thread/closed"
	NoteTurnStarted           = "turn/started"
	NoteTurnCompleted         = "turn/completed"
	NoteItemStarted           = "item/started"
	NoteItemCompleted         = "item/completed"
	NoteAgentMessageDelta     = "item/agentMessage/delta"
	NoteServerRequestResolved = "serverRequest/resolved"
)

// Turn statuses. 0.169 has no "replaced": a steered turn keeps its id.
const (
	TurnInProgress  = "inProgress"
	TurnCompleted   = "completed"
	TurnFailed      = "failed"
	TurnInterrupted = "interrupted"
)

// Thread status types.
const (
	ThreadNotLoaded   = "notLoaded"
	ThreadIdle        = "idle"
	ThreadActive      = "active"
	ThreadSystemError = "systemError"
)

// ClientInfo names the client; Codex puts the name of the first client of a
// process in the originator header of every model call it makes.
type ClientInfo struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

// Capabilities are declared once, in initialize.
type Capabilities struct {
	// ExperimentalAPI opts into experimental methods and fields; cbth's
	// delivery needs it (spec/codex-cli.md).
	ExperimentalAPI bool `json:"experimentalApi"`
	// OptOutNotificationMethods suppresses those notifications on this
	// connection (a delivery client needs no text deltas).
	OptOutNotificationMethods []string `json:"optOutNotificationMethods,omitempty"`
}

// InitializeParams is the first request on a connection.
type InitializeParams struct {
	ClientInfo   ClientInfo    `json:"clientInfo"`
	Capabilities *Capabilities `json:"capabilities,omitempty"`
}

// InitializeResult describes the server.
type InitializeResult struct {
	UserAgent      string `json:"userAgent"`
	CodexHome      string `json:"codexHome"`
	PlatformFamily string `json:"platformFamily"`
	PlatformOS     string `json:"platformOs"`
}

// Initialize sends initialize and then the initialized notification.
func (c *Client) Initialize(ctx context.Context, info ClientInfo, caps Capabilities) (InitializeResult, error) {
	var res InitializeResult
	if err := c.Call(ctx, MethodInitialize, InitializeParams{ClientInfo: info, Capabilities: &caps}, &res); err != nil {
		return res, err
	}
	// 0.169 serves requests without it; it is sent because the protocol
	// defines it and a later version may insist.
	return res, c.Notify(ctx, MethodInitialized, nil)
}

// Thread is a conversation.
type Thread struct {
	ID        string       `json:"id"`
	SessionID string       `json:"sessionId"`
	Ephemeral bool         `json:"ephemeral"`
	Status    ThreadStatus `json:"status"`
	// ThreadSource is null for ordinary threads and "thread_title" for the
	// ephemeral threads Codex makes to title a TUI conversation.
	ThreadSource *string `json:"threadSource"`
	Cwd          string  `json:"cwd"`
	Path         *string `json:"path"`
	CLIVersion   string  `json:"cliVersion"`
	Turns        []Turn  `json:"turns"`
	// Source is where the thread came from: "cli", "vscode", "exec",
	// "appServer", "unknown", or an object ({"custom":...},
	// {"subAgent":...}).
	Source json.RawMessage `json:"source,omitempty"`
}

// SourceName is t's source as one word: the string Codex sent, or the
// object's one key ("custom", "subAgent"); "" when it sent none.
func (t Thread) SourceName() string {
	var s string
	if json.Unmarshal(t.Source, &s) == nil {
		return s
	}
	var o map[string]json.RawMessage
	if json.Unmarshal(t.Source, &o) == nil && len(o) == 1 {
		for k := range o {
			return k
		}
	}
	return ""
}

// SourceExec is the source of a thread `codex exec` started.
const SourceExec = "exec"

// ThreadStatus is a thread's load and activity state.
type ThreadStatus struct {
	Type        string   `json:"type"`
	ActiveFlags []string `json:"activeFlags,omitempty"`
}

// Turn is one user input and everything Codex did about it.
type Turn struct {
	ID          string            `json:"id"`
	Status      string            `json:"status"`
	Error       *TurnError        `json:"error"`
	Items       []json.RawMessage `json:"items"`
	ItemsView   string            `json:"itemsView"`
	StartedAt   *int64            `json:"startedAt"`
	CompletedAt *int64            `json:"completedAt"`
	DurationMs  *int64            `json:"durationMs"`
}

// TurnError says why a turn failed or was interrupted.
type TurnError struct {
	Message        string          `json:"message"`
	CodexErrorInfo json.RawMessage `json:"codexErrorInfo,omitempty"`
}

// ActivePermissionProfile names the permission profile a thread runs under;
// null when the legacy sandbox mode chose its permissions.
type ActivePermissionProfile struct {
	ID      string  `json:"id"`
	Extends *string `json:"extends"`
}

// The approval policies of 0.169 as strings (besides the granular object).
const (
	ApprovalNever     = "never"
	ApprovalOnRequest = "on-request"
	ApprovalUntrusted = "untrusted"
)

// ThreadSession is the answer to thread/start and thread/resume: the thread
// and the settings it now runs with. ApprovalPolicy is a string ("never",
// "on-request", "untrusted") or {"granular":{...}}; Sandbox is a tagged
// object ({"type":"readOnly",...}); both are kept raw for the permission
// snapshot.
type ThreadSession struct {
	Thread                  Thread                   `json:"thread"`
	Model                   string                   `json:"model"`
	ModelProvider           string                   `json:"modelProvider"`
	Cwd                     string                   `json:"cwd"`
	ApprovalPolicy          json.RawMessage          `json:"approvalPolicy"`
	ApprovalsReviewer       string                   `json:"approvalsReviewer"`
	Sandbox                 json.RawMessage          `json:"sandbox"`
	ActivePermissionProfile *ActivePermissionProfile `json:"activePermissionProfile"`
	ReasoningEffort         *string                  `json:"reasoningEffort"`
}

// ThreadStartParams start a thread; every field is optional. Sandbox is a
// mode ("read-only", "workspace-write", "danger-full-access") and cannot
// be combined with Permissions (a profile id).
type ThreadStartParams struct {
	Cwd            string          `json:"cwd,omitempty"`
	Model          string          `json:"model,omitempty"`
	ModelProvider  string          `json:"modelProvider,omitempty"`
	ApprovalPolicy json.RawMessage `json:"approvalPolicy,omitempty"`
	Sandbox        string          `json:"sandbox,omitempty"`
	Permissions    string          `json:"permissions,omitempty"`
	Ephemeral      bool            `json:"ephemeral,omitempty"`
}

// ThreadResumeParams load a thread into this app-server (if needed) and
// subscribe the connection to its turns. The settings, when given,
// override the thread's and persist.
type ThreadResumeParams struct {
	ThreadID          string          `json:"threadId"`
	ExcludeTurns      bool            `json:"excludeTurns,omitempty"`
	Cwd               string          `json:"cwd,omitempty"`
	Model             string          `json:"model,omitempty"`
	ModelProvider     string          `json:"modelProvider,omitempty"`
	ApprovalPolicy    json.RawMessage `json:"approvalPolicy,omitempty"`
	ApprovalsReviewer string          `json:"approvalsReviewer,omitempty"`
	Sandbox           string          `json:"sandbox,omitempty"`
	Permissions       string          `json:"permissions,omitempty"`
}

// ThreadReadParams read a loaded thread without subscribing.
type ThreadReadParams struct {
	ThreadID     string `json:"threadId"`
	IncludeTurns bool   `json:"includeTurns,omitempty"`
}

// ThreadReadResult is the answer to thread/read.
type ThreadReadResult struct {
	Thread Thread `json:"thread"`
}

// TurnsListParams page through a loaded thread's turns.
type TurnsListParams struct {
	ThreadID      string `json:"threadId"`
	Cursor        string `json:"cursor,omitempty"`
	Limit         int    `json:"limit,omitempty"`
	SortDirection string `json:"sortDirection,omitempty"` // "asc" or "desc"
	ItemsView     string `json:"itemsView,omitempty"`     // "notLoaded", "summary" or "full"
}

// TurnsListResult is one page of turns.
type TurnsListResult struct {
	Data            []Turn  `json:"data"`
	NextCursor      *string `json:"nextCursor"`
	BackwardsCursor *string `json:"backwardsCursor"`
}

// Input is one user input item; cbth sends text only.
type Input struct {
	Type         string            `json:"type"`
	Text         string            `json:"text"`
	TextElements []json.RawMessage `json:"text_elements"`
}

// TextInput is a text input item.
func TextInput(s string) Input {
	return Input{Type: "text", Text: s, TextElements: []json.RawMessage{}}
}

// TurnStartParams start a turn on a loaded thread. ApprovalPolicy,
// SandboxPolicy (a tagged object) and Permissions (a profile id; not with
// SandboxPolicy) apply to this turn and the ones after it.
type TurnStartParams struct {
	ThreadID       string          `json:"threadId"`
	Input          []Input         `json:"input"`
	ApprovalPolicy json.RawMessage `json:"approvalPolicy,omitempty"`
	SandboxPolicy  json.RawMessage `json:"sandboxPolicy,omitempty"`
	Permissions    string          `json:"permissions,omitempty"`
}

// TurnStartResult carries the accepted turn (status inProgress).
type TurnStartResult struct {
	Turn Turn `json:"turn"`
}

// TurnSteerParams add input to the active turn, which must be
// ExpectedTurnID.
type TurnSteerParams struct {
	ThreadID       string  `json:"threadId"`
	ExpectedTurnID string  `json:"expectedTurnId"`
	Input          []Input `json:"input"`
}

// TurnSteerResult names the turn that took the input.
type TurnSteerResult struct {
	TurnID string `json:"turnId"`
}

// TurnInterruptParams stop a running turn.
type TurnInterruptParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

// ThreadStartedNote is the params of thread/started (sent to every
// connection, for every thread).
type ThreadStartedNote struct {
	Thread Thread `json:"thread"`
}

// ThreadStatusChangedNote is the params of thread/status/changed (sent to
// every connection).
type ThreadStatusChangedNote struct {
	ThreadID string       `json:"threadId"`
	Status   ThreadStatus `json:"status"`
}

// ThreadClosedNote is the params of thread/closed (sent to every
// connection when a thread is unloaded).
type ThreadClosedNote struct {
	ThreadID string `json:"threadId"`
}

// TurnNote is the params of turn/started and turn/completed (sent to the
// connections subscribed to the thread).
type TurnNote struct {
	ThreadID string `json:"threadId"`
	Turn     Turn   `json:"turn"`
}

// ThreadStart starts a thread.
func (c *Client) ThreadStart(ctx context.Context, p ThreadStartParams) (ThreadSession, error) {
	var r ThreadSession
	return r, c.Call(ctx, MethodThreadStart, p, &r)
}

// ThreadResume loads and subscribes to a thread.
func (c *Client) ThreadResume(ctx context.Context, p ThreadResumeParams) (ThreadSession, error) {
	var r ThreadSession
	return r, c.Call(ctx, MethodThreadResume, p, &r)
}

// ThreadRead reads a loaded thread.
func (c *Client) ThreadRead(ctx context.Context, p ThreadReadParams) (Thread, error) {
	var r ThreadReadResult
	return r.Thread, c.Call(ctx, MethodThreadRead, p, &r)
}

// ThreadLoadedListResult is one page of the ids of the threads loaded
// in the server.
type ThreadLoadedListResult struct {
	Data       []string `json:"data"`
	NextCursor *string  `json:"nextCursor"`
}

// ThreadLoaded lists every thread loaded in the server, page by page: a
// read that loads nothing (a thread/resume would load the thread).
func (c *Client) ThreadLoaded(ctx context.Context) ([]string, error) {
	var out []string
	cursor := ""
	for page := 0; page < 1000; page++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		var r ThreadLoadedListResult
		if err := c.Call(ctx, MethodThreadLoaded, params, &r); err != nil {
			return nil, err
		}
		out = append(out, r.Data...)
		if r.NextCursor == nil || *r.NextCursor == "" {
			return out, nil
		}
		cursor = *r.NextCursor
	}
	return out, nil
}

// TurnsList lists a loaded thread's turns.
func (c *Client) TurnsList(ctx context.Context, p TurnsListParams) (TurnsListResult, error) {
	var r TurnsListResult
	return r, c.Call(ctx, MethodThreadTurnsList, p, &r)
}

// TurnStart starts a turn.
func (c *Client) TurnStart(ctx context.Context, p TurnStartParams) (Turn, error) {
	var r TurnStartResult
	return r.Turn, c.Call(ctx, MethodTurnStart, p, &r)
}

// TurnSteer adds input to the active turn.
func (c *Client) TurnSteer(ctx context.Context, p TurnSteerParams) (string, error) {
	var r TurnSteerResult
	return r.TurnID, c.Call(ctx, MethodTurnSteer, p, &r)
}

// TurnInterrupt interrupts a turn; turn/completed with status interrupted
// follows.
func (c *Client) TurnInterrupt(ctx context.Context, p TurnInterruptParams) error {
	return c.Call(ctx, MethodTurnInterrupt, p, nil)
}
