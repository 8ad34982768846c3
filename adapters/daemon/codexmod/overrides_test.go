package codexmod

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// The shared app-server's overrides approve what an install approves by
// default and never task_run or desktop_bridge_preflight: those
// approvals are the user's (`cbth mcp install --approve`).
func TestMCPOverridesApproveNoOptInTool(t *testing.T) {
	o := mcpOverrides("/home/u/.cbth", slog.New(slog.DiscardHandler))
	if !slices.Contains(o, `mcp_servers.cbth.tools.job_submit.approval_mode="approve"`) {
		t.Fatalf("overrides %q lack job_submit's approval", o)
	}
	for _, a := range o {
		if strings.Contains(a, "tools.task_run.") || strings.Contains(a, "tools.desktop_bridge_preflight.") {
			t.Errorf("the overrides approve an opt-in tool: %q", a)
		}
	}
}
