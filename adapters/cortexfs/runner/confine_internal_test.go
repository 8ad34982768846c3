package runner

import (
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tool"
	"github.com/cbth-dev/cbth/internal/confine"
)

// Where the system cannot confine shell.exec (a kernel without Landlock)
// an object that runs it says so on stderr, naming why, every time: the
// tool itself and an agent with it; an agent without it, a model, or any
// object on a system that confines, says nothing. This is the unconfined
// half of cmd/cbth's TestAgentShellExecIsConfined, which a machine with
// Landlock cannot reach.
func TestUnconfinedWarning(t *testing.T) {
	none := confine.Status{Mechanism: "none: this kernel has no Landlock"}
	landlock := confine.Status{Available: true, Mechanism: "landlock ABI 7"}
	shellTool := Object{Path: "/ctx/tool/shell.exec", Object: object.Object{Kind: object.KindTool, Path: tool.ShellExec}}
	otherTool := Object{Path: "/ctx/tool/fs.read", Object: object.Object{Kind: object.KindTool, Path: tool.FSRead}}
	agent := Object{Path: "/ctx/agent/coder", Object: object.Object{Kind: object.KindAgent, Path: "coder", Tools: []string{tool.FSRead, tool.ShellExec}}}
	reader := Object{Path: "/ctx/agent/reader", Object: object.Object{Kind: object.KindAgent, Path: "reader", Tools: []string{tool.FSRead}}}
	model := Object{Path: "/ctx/model/debug/echo", Object: object.Object{Kind: object.KindModel, Path: "debug/echo"}}
	for _, c := range []struct {
		name string
		obj  Object
		st   confine.Status
		warn bool
	}{
		{"the shell tool, unconfined", shellTool, none, true},
		{"an agent with the shell, unconfined", agent, none, true},
		{"an agent without the shell", reader, none, false},
		{"another tool", otherTool, none, false},
		{"a model", model, none, false},
		{"the shell tool, confined", shellTool, landlock, false},
		{"an agent with the shell, confined", agent, landlock, false},
	} {
		w := unconfinedWarning(c.obj, c.st)
		if !c.warn {
			if w != "" {
				t.Errorf("%s: warned %q", c.name, w)
			}
			continue
		}
		if !strings.Contains(w, "UNCONFINED") || !strings.Contains(w, c.st.Mechanism) || !strings.HasSuffix(w, "\n") {
			t.Errorf("%s: warning %q, want UNCONFINED and why (%s) on a line", c.name, w, c.st.Mechanism)
		}
	}
}
