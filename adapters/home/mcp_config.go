package home

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/internal/errs"
)

// MCP is the [mcp] table: what the agent's MCP tools may do
// (spec/mcp.md).
type MCP struct {
	// TaskAllow lists the commands task_run may run, each as an argv
	// prefix: ["make", "test"] allows `make test` and `make test -v`,
	// never `make install`. A task_run runs outside Codex's sandbox, so
	// nothing is allowed unless the user wrote it here.
	TaskAllow [][]string `toml:"task_allow"`
}

// Allowed returns the first rule argv starts with, element by element.
func (m MCP) Allowed(argv []string) ([]string, bool) {
	for _, rule := range m.TaskAllow {
		if len(argv) >= len(rule) && slices.Equal(argv[:len(rule)], rule) {
			return rule, true
		}
	}
	return nil, false
}

// checkMCP refuses a rule that would allow more than it says: an empty
// rule allows everything, an empty element matches only an empty
// argument, a NUL can never reach exec.
func (h Home) checkMCP(c Config) error {
	for i, rule := range c.MCP.TaskAllow {
		if len(rule) == 0 {
			return errs.New(errs.EINVAL, "%s: [mcp] task_allow rule %d is empty (it would allow every command)", h.Config(), i+1)
		}
		for _, a := range rule {
			if a == "" || strings.ContainsRune(a, 0) || !utf8.ValidString(a) {
				return errs.New(errs.EINVAL, "%s: [mcp] task_allow rule %d has an empty or invalid element %q", h.Config(), i+1, a)
			}
		}
	}
	return nil
}
