package sessions_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

func perm(approval, network, write events.Allow) events.Permissions {
	return events.Permissions{AllowsApproval: approval, AllowsNetwork: network, AllowsWriteAccess: write}
}

// Every permission shape 0.169's schema allows in a thread/resume answer
// reads as spec/codex-cli.md says; anything else is unknown (fail closed).
func TestReadingOf(t *testing.T) {
	const (
		T = events.AllowTrue
		F = events.AllowFalse
		U = events.AllowUnknown
	)
	for _, tc := range []struct {
		approval, sandbox string
		want              events.Permissions
	}{
		{`"never"`, `{"type":"readOnly","networkAccess":false}`, perm(F, F, F)},
		{`"never"`, `{"type":"readOnly"}`, perm(F, F, F)},
		{`"on-request"`, `{"type":"readOnly","networkAccess":true}`, perm(T, T, F)},
		{`"untrusted"`, `{"type":"workspaceWrite","writableRoots":["/p"],"networkAccess":false,"excludeTmpdirEnvVar":false,"excludeSlashTmp":false}`, perm(T, F, T)},
		{`"never"`, `{"type":"dangerFullAccess"}`, perm(F, T, T)},
		{`"never"`, `{"type":"externalSandbox","networkAccess":"restricted"}`, perm(F, F, U)},
		{`"never"`, `{"type":"externalSandbox","networkAccess":"enabled"}`, perm(F, T, U)},
		{`"never"`, `{"type":"externalSandbox"}`, perm(F, F, U)},
		{`{"granular":{"sandbox_approval":false,"rules":false,"mcp_elicitations":false}}`, `{"type":"readOnly"}`, perm(F, F, F)},
		{`{"granular":{"sandbox_approval":false,"rules":true,"mcp_elicitations":false,"skill_approval":false}}`, `{"type":"readOnly"}`, perm(T, F, F)},
		{`{"granular":{"sandbox_approval":false}}`, `{"type":"readOnly"}`, perm(U, F, F)},
		{`"on-failure"`, `{"type":"readOnly","networkAccess":"yes"}`, perm(U, U, F)},
		{`null`, `{"type":"somethingNew"}`, perm(U, U, U)},
		{``, ``, perm(U, U, U)},
	} {
		ts := appserver.ThreadSession{ApprovalPolicy: json.RawMessage(tc.approval), Sandbox: json.RawMessage(tc.sandbox), ApprovalsReviewer: "user"}
		got := sessions.ReadingOf(ts)
		if got.Current != tc.want {
			t.Errorf("approval %s sandbox %s: %+v, want %+v", tc.approval, tc.sandbox, got.Current, tc.want)
		}
		var snap sessions.Snapshot
		if err := json.Unmarshal(got.Snapshot, &snap); err != nil {
			t.Errorf("snapshot %s: %v", got.Snapshot, err)
		}
	}
	extends := ":read-only"
	got := sessions.ReadingOf(appserver.ThreadSession{ApprovalPolicy: json.RawMessage(`"never"`), Sandbox: json.RawMessage(`{"type":"readOnly"}`),
		ActivePermissionProfile: &appserver.ActivePermissionProfile{ID: "p1", Extends: &extends}})
	if string(got.Snapshot) != `{"approvalPolicy":"never","approvalsReviewer":"","sandbox":{"type":"readOnly"},"activePermissionProfile":{"id":"p1","extends":":read-only"}}` {
		t.Errorf("snapshot %s", got.Snapshot)
	}
}

// A managed run passes codex only options the delivery client can mirror;
// an exploratory one anything but what would take it off the shared
// app-server. The command line puts cbth's options first, then the user's,
// then the subcommand and a prompt.
func TestForegroundArgs(t *testing.T) {
	refused := []struct {
		mode string
		args []string
	}{
		{sessions.ModeNewThread, []string{"--sandbox", "danger-full-access"}},
		{sessions.ModeNewThread, []string{"-s", "read-only"}},
		{sessions.ModeNewThread, []string{"-a", "never"}},
		{sessions.ModeNewThread, []string{"-c", "model=x"}},
		{sessions.ModeNewThread, []string{"--config=sandbox_mode=x"}},
		{sessions.ModeNewThread, []string{"--add-dir", "/tmp"}},
		{sessions.ModeNewThread, []string{"--search"}},
		{sessions.ModeNewThread, []string{"--enable", "x"}},
		{sessions.ModeNewThread, []string{"--dangerously-bypass-approvals-and-sandbox"}},
		{sessions.ModeNewThread, []string{"-p", "work"}},
		{sessions.ModeNewThread, []string{"--oss"}},
		{sessions.ModeNewThread, []string{"--worktree"}},
		{sessions.ModeBindThread, []string{"-m", "gpt-5.5"}},
		{sessions.ModeBindThread, []string{"resume"}},
		{sessions.ModeNewThread, []string{"exec", "hi"}},
		{sessions.ModeExploratory, []string{"--remote", "ws://x"}},
		{sessions.ModeExploratory, []string{"-C", "/tmp"}},
		{sessions.ModeExploratory, []string{"--no-daemon"}},
	}
	for _, tc := range refused {
		if err := sessions.CheckForegroundArgs(tc.mode, tc.args); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("%s %v: %v, want EINVAL", tc.mode, tc.args, err)
		}
	}
	for _, tc := range []struct {
		mode, thread string
		args, want   []string
	}{
		{sessions.ModeNewThread, "", nil, []string{"--remote", "unix:///s", "--cd", "/p"}},
		{sessions.ModeNewThread, "", []string{"-m", "gpt-5.5", "--no-alt-screen", "fix", "it"},
			[]string{"--remote", "unix:///s", "--cd", "/p", "-m", "gpt-5.5", "--no-alt-screen", "fix", "it"}},
		{sessions.ModeBindThread, "T", []string{"resume it", "-i", "a.png"},
			[]string{"--remote", "unix:///s", "--cd", "/p", "resume", "T", "--", "resume it", "-i", "a.png"}},
		{sessions.ModeBindThread, "T", []string{"--image=a.png", "--", "-x"},
			[]string{"--remote", "unix:///s", "--cd", "/p", "--image=a.png", "resume", "T", "--", "-x"}},
		{sessions.ModeExploratory, "", []string{"--sandbox", "danger-full-access", "hello"},
			[]string{"--remote", "unix:///s", "--cd", "/p", "--sandbox", "danger-full-access", "hello"}},
	} {
		got, err := sessions.ForegroundArgs("/s", "/p", tc.mode, tc.thread, tc.args)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s %v: %q %v, want %q", tc.mode, tc.args, got, err, tc.want)
		}
	}
}
