package clitarget

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
)

// The sandbox policies 0.169 reports and turn/start accepts.
var sandboxTypes = []string{"readOnly", "workspaceWrite", "dangerFullAccess", "externalSandbox"}

// repeatOwn is the turn/start settings that repeat a thread's own as its
// resume answer reports them, or why they cannot be repeated without
// changing them: a turn's settings stay with the thread for the turns
// after it, so a delivery must carry exactly what the thread has.
//
// The approval policy goes as read. A built-in permission profile (":"
// and no parent) goes by its id; a thread with no active profile gets its
// legacy sandbox policy as read. A profile of the user's own, or one that
// extends another, cannot be named without resolving it afresh, and the
// legacy policy would drop it: such a thread is not delivered into
// automatically. Nor is one whose sandbox cannot be read, or holds a
// writable root that is not a clean absolute path.
func repeatOwn(ts appserver.ThreadSession) (appserver.TurnStartParams, string) {
	var p appserver.TurnStartParams
	ap := bytes.TrimSpace(ts.ApprovalPolicy)
	if len(ap) == 0 || string(ap) == "null" {
		return p, "the thread's approval policy cannot be read, so the turn's permissions cannot be pinned"
	}
	p.ApprovalPolicy = ts.ApprovalPolicy
	if prof := ts.ActivePermissionProfile; prof != nil {
		if !strings.HasPrefix(prof.ID, ":") || prof.Extends != nil {
			return p, fmt.Sprintf("the thread runs under permission profile %q, which turn/start cannot repeat without replacing it; deliver with cbth cli run --bind-thread-id, or close the batch", prof.ID)
		}
		p.Permissions = prof.ID
		return p, ""
	}
	var sb struct {
		Type          string   `json:"type"`
		WritableRoots []string `json:"writableRoots"`
	}
	if len(ts.Sandbox) == 0 || json.Unmarshal(ts.Sandbox, &sb) != nil || !slices.Contains(sandboxTypes, sb.Type) {
		return p, "the thread's sandbox cannot be read, so the turn's permissions cannot be pinned"
	}
	for _, r := range sb.WritableRoots {
		if !filepath.IsAbs(r) || slices.Contains(strings.Split(r, string(filepath.Separator)), "..") {
			return p, fmt.Sprintf("writable root %q of the thread's sandbox is not a clean absolute path", r)
		}
	}
	p.SandboxPolicy = ts.Sandbox
	return p, ""
}
