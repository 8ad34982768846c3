package clitarget

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/engine/aggregate"
	"github.com/cbth-dev/cbth/engine/command/codex"
	"github.com/cbth-dev/cbth/events"
)

func thread(approval, sandbox string, profile *appserver.ActivePermissionProfile) appserver.ThreadSession {
	ts := appserver.ThreadSession{ActivePermissionProfile: profile}
	if approval != "" {
		ts.ApprovalPolicy = json.RawMessage(approval)
	}
	if sandbox != "" {
		ts.Sandbox = json.RawMessage(sandbox)
	}
	return ts
}

func profile(id string, extends *string) *appserver.ActivePermissionProfile {
	return &appserver.ActivePermissionProfile{ID: id, Extends: extends}
}

// A delivery repeats the thread's own settings exactly, or says why it
// cannot: a turn's settings stay with the thread for the user's turns
// after it.
func TestRepeatOwn(t *testing.T) {
	parent := ":workspace"
	for _, c := range []struct {
		name        string
		ts          appserver.ThreadSession
		approval    string
		permissions string
		sandbox     string
		why         string
	}{
		{name: "a built-in profile goes by its id", ts: thread(`"on-request"`, `{"type":"workspaceWrite"}`, profile(":workspace", nil)),
			approval: `"on-request"`, permissions: ":workspace"},
		{name: "read-only under the built-in profile", ts: thread(`"never"`, `{"type":"readOnly","networkAccess":false}`, profile(":read-only", nil)),
			approval: `"never"`, permissions: ":read-only"},
		{name: "no profile: the legacy sandbox as read", ts: thread(`"never"`, `{"type":"readOnly","networkAccess":false}`, nil),
			approval: `"never"`, sandbox: `{"type":"readOnly","networkAccess":false}`},
		{name: "a granular approval policy as read", ts: thread(`{"granular":{"sandbox_approval":false,"rules":false,"mcp_elicitations":false}}`, `{"type":"readOnly"}`, nil),
			approval: `{"granular":{"sandbox_approval":false,"rules":false,"mcp_elicitations":false}}`, sandbox: `{"type":"readOnly"}`},
		{name: "a user's own profile", ts: thread(`"never"`, `{"type":"readOnly"}`, profile("mine", nil)), why: `profile "mine"`},
		{name: "a profile that extends another", ts: thread(`"never"`, `{"type":"readOnly"}`, profile(":read-only", &parent)), why: `profile ":read-only"`},
		{name: "no approval policy", ts: thread("", `{"type":"readOnly"}`, nil), why: "approval policy cannot be read"},
		{name: "a sandbox of an unknown type", ts: thread(`"never"`, `{"type":"sealed"}`, nil), why: "sandbox cannot be read"},
		{name: "a sandbox that is not an object", ts: thread(`"never"`, `"read-only"`, nil), why: "sandbox cannot be read"},
		{name: "a writable root with ..", ts: thread(`"on-request"`, `{"type":"workspaceWrite","writableRoots":["/w/../etc"]}`, nil), why: "not a clean absolute path"},
		{name: "a relative writable root", ts: thread(`"on-request"`, `{"type":"workspaceWrite","writableRoots":["w"]}`, nil), why: "not a clean absolute path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, why := repeatOwn(c.ts)
			if c.why != "" {
				if !strings.Contains(why, c.why) {
					t.Fatalf("why %q, want %q", why, c.why)
				}
				return
			}
			if why != "" || string(p.ApprovalPolicy) != c.approval || p.Permissions != c.permissions || string(p.SandboxPolicy) != c.sandbox {
				t.Fatalf("params %s/%s/%s (%q), want %s/%s/%s", p.ApprovalPolicy, p.Permissions, p.SandboxPolicy, why, c.approval, c.permissions, c.sandbox)
			}
		})
	}
}

// The trust decides what goes: strict lets through only a thread whose
// effective and current permissions are all false, and names the command
// that trusts it otherwise; own_permissions lets any thread through with
// its own. Whatever the trust, settings that cannot be repeated park.
func TestPinByTrust(t *testing.T) {
	tg := New(Config{}, nil, nil, nil, nil)
	reading := func(ts appserver.ThreadSession, startup events.Permissions) sessions.ThreadReading {
		r := sessions.ReadingOf(ts)
		return sessions.ThreadReading{Thread: ts, Observation: codex.Observation{Startup: startup, Current: r.Current, Effective: startup.And(r.Current)}}
	}
	no := events.Permissions{AllowsApproval: events.AllowFalse, AllowsNetwork: events.AllowFalse, AllowsWriteAccess: events.AllowFalse}
	wide := events.Permissions{AllowsApproval: events.AllowTrue, AllowsNetwork: events.AllowFalse, AllowsWriteAccess: events.AllowTrue}
	readOnly := thread(`"never"`, `{"type":"readOnly","networkAccess":false}`, nil)
	workspace := thread(`"on-request"`, `{"type":"workspaceWrite","networkAccess":false}`, profile(":workspace", nil))
	unreadable := thread(`"never"`, `{"mode":"??"}`, nil)
	for _, c := range []struct {
		name       string
		r          sessions.ThreadReading
		trust      string
		hold, park string
	}{
		{name: "strict, a read-only thread", r: reading(readOnly, no), trust: events.TrustStrict},
		{name: "strict, a workspace thread", r: reading(workspace, wide), trust: events.TrustStrict, hold: "cbth thread trust --thread-id T --own-permissions"},
		{name: "strict, widened since its start", r: reading(workspace, no), trust: events.TrustStrict, hold: "wider than the session's startup cap"},
		{name: "strict, a sandbox that cannot be parsed", r: reading(unreadable, no), trust: events.TrustStrict, hold: "wider than the session's startup cap"},
		{name: "own permissions, a workspace thread", r: reading(workspace, wide), trust: events.TrustOwnPermissions},
		{name: "own permissions, a sandbox that cannot be parsed", r: reading(unreadable, no), trust: events.TrustOwnPermissions, park: "sandbox cannot be read"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, v := tg.pin(c.r, c.trust, "T")
			switch {
			case c.hold != "" && !strings.Contains(v.hold, c.hold):
				t.Fatalf("hold %q, want %q", v.hold, c.hold)
			case c.park != "" && !strings.Contains(v.park, c.park):
				t.Fatalf("park %q, want %q", v.park, c.park)
			case c.hold == "" && c.park == "" && (v.hold != "" || v.park != "" || len(p.ApprovalPolicy) == 0):
				t.Fatalf("refused: %+v", v)
			}
		})
	}
}

// A result goes to Codex's own queue only when the user asked for the
// hand-off, trusted the thread with its own permissions, and the thread's
// source is known and not codex exec.
func TestQueueable(t *testing.T) {
	on := New(Config{QueueHandoff: true}, nil, nil, nil, nil)
	off := New(Config{}, nil, nil, nil, nil)
	daemonSession := func(source string) *aggregate.Session {
		return &aggregate.Session{Mode: codex.ModeCodexDaemon, ThreadSource: source}
	}
	for _, c := range []struct {
		name  string
		tg    *Target
		s     *aggregate.Session
		trust string
		why   string
	}{
		{"trusted, from the TUI", on, daemonSession("cli"), events.TrustOwnPermissions, ""},
		{"the hand-off off", off, daemonSession("cli"), events.TrustOwnPermissions, "queue_handoff is off"},
		{"strict", on, daemonSession("cli"), events.TrustStrict, "not trusted"},
		{"started by codex exec", on, daemonSession(appserver.SourceExec), events.TrustOwnPermissions, "codex exec"},
		{"a source not known", on, daemonSession(""), events.TrustOwnPermissions, "not known"},
		{"a cbth cli run session", on, &aggregate.Session{Mode: codex.ModeBindThread, ThreadSource: "cli"}, events.TrustOwnPermissions, "not known"},
		{"no session", on, nil, events.TrustOwnPermissions, "not known"},
	} {
		if why := c.tg.queueable(c.s, c.trust); !strings.Contains(why, c.why) || (c.why == "") != (why == "") {
			t.Errorf("%s: %q, want %q", c.name, why, c.why)
		}
	}
}
