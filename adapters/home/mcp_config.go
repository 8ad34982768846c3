package home

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	taskcmd "github.com/cbth-dev/cbth/engine/command/task"
	"github.com/cbth-dev/cbth/internal/errs"
)

// MCP is the [mcp] table: what the agent's MCP tools may do
// (spec/mcp.md). A task_run runs outside Codex's sandbox, as the user,
// so nothing runs unless the user wrote a rule for it here, and a rule
// allows exactly what it reads as.
type MCP struct {
	// TaskAllow lists whole commands: ["make", "test"] allows `make
	// test` and nothing else. A last element "..." lets the rule take
	// more plain arguments (AnyPlain).
	TaskAllow [][]string `toml:"task_allow"`
	// Tasks are the named tasks, [mcp.tasks.NAME]: the model asks for
	// one by its name.
	Tasks map[string]NamedTask `toml:"tasks"`
}

// NamedTask is one [mcp.tasks.NAME] table.
type NamedTask struct {
	// Argv is the command, whole.
	Argv []string `toml:"argv"`
	// Args are the extra arguments the model may add, as patterns
	// (ArgMatches): "-v" that argument, "-run=*" any argument that
	// starts with "-run=", "..." any plain argument.
	Args []string `toml:"args"`
	// Summary says what the task is for; the model reads it in
	// task_list.
	Summary string `toml:"summary"`
	// WakesPerHour bounds the wakes of the task run as a watcher
	// (watch_start): 1 to 600; unset, the default (6).
	WakesPerHour *int `toml:"wakes_per_hour"`
}

// AnyPlain, as the last element of a task_allow rule or as an args
// pattern, lets through any number of plain arguments: ones that neither
// start with "-" nor hold "=". Options and assignments are where test
// runners and build tools take a command to run (make --eval=, make
// SHELL=, go test -exec), so a rule lets one through only by naming it.
const AnyPlain = "..."

// MaxTaskName bounds a named task's name.
const MaxTaskName = 64

var taskName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// TaskRule is one command task_run may run, whichever form the user wrote
// it in: a task_allow rule or a named task. It is the unit a per-rule
// setting (such as a watcher's wake bound) is added to.
type TaskRule struct {
	// Name is the named task's name; "" for a task_allow rule.
	Name string `json:"task,omitempty"`
	// Argv is the command, compared element by element.
	Argv []string `json:"argv"`
	// Args are the patterns the extra arguments must each match; none
	// makes the rule exact.
	Args []string `json:"args,omitempty"`
	// Summary is a named task's summary.
	Summary string `json:"summary,omitempty"`
	// WakesPerHour bounds the wakes of the command run as a watcher
	// (watch_start): the named task's wakes_per_hour, else the default.
	WakesPerHour int `json:"wakes_per_hour"`
}

// Rules are every rule: the task_allow rules in their order, then the
// named tasks by name.
func (m MCP) Rules() []TaskRule {
	var out []TaskRule
	for _, r := range m.TaskAllow {
		rule := TaskRule{Argv: r, WakesPerHour: taskcmd.DefaultWakesPerHour}
		if n := len(r); n > 0 && r[n-1] == AnyPlain {
			rule = TaskRule{Argv: r[:n-1], Args: []string{AnyPlain}, WakesPerHour: taskcmd.DefaultWakesPerHour}
		}
		out = append(out, rule)
	}
	for _, name := range slices.Sorted(maps.Keys(m.Tasks)) {
		r, _ := m.Task(name)
		out = append(out, r)
	}
	return out
}

// Task returns the named task.
func (m MCP) Task(name string) (TaskRule, bool) {
	t, ok := m.Tasks[name]
	if !ok {
		return TaskRule{}, false
	}
	r := TaskRule{Name: name, Argv: t.Argv, Args: t.Args, Summary: t.Summary, WakesPerHour: taskcmd.DefaultWakesPerHour}
	if t.WakesPerHour != nil {
		r.WakesPerHour = *t.WakesPerHour
	}
	return r, true
}

// TaskNames are the named tasks' names, sorted.
func (m MCP) TaskNames() []string { return slices.Sorted(maps.Keys(m.Tasks)) }

// Allowed returns the first rule that allows argv whole.
func (m MCP) Allowed(argv []string) (TaskRule, bool) {
	for _, r := range m.Rules() {
		if r.Why(argv) == "" {
			return r, true
		}
	}
	return TaskRule{}, false
}

// Closest is the rule whose command is the longest prefix of argv (the
// one the user most likely meant), if any.
func (m MCP) Closest(argv []string) (TaskRule, bool) {
	var best TaskRule
	found := false
	for _, r := range m.Rules() {
		if len(argv) >= len(r.Argv) && slices.Equal(argv[:len(r.Argv)], r.Argv) && (!found || len(r.Argv) > len(best.Argv)) {
			best, found = r, true
		}
	}
	return best, found
}

// Written is the rule as the user wrote it in task_allow (a named task's
// command with "..." when it takes plain arguments only).
func (r TaskRule) Written() []string {
	if slices.Equal(r.Args, []string{AnyPlain}) {
		return append(slices.Clone(r.Argv), AnyPlain)
	}
	return slices.Clone(r.Argv)
}

// Why says why r does not allow argv ("" when it does).
func (r TaskRule) Why(argv []string) string {
	if len(argv) < len(r.Argv) || !slices.Equal(argv[:len(r.Argv)], r.Argv) {
		return fmt.Sprintf("the command is not %s", quoteList(r.Argv))
	}
	for _, a := range argv[len(r.Argv):] {
		if slices.ContainsFunc(r.Args, func(p string) bool { return ArgMatches(p, a) }) {
			continue
		}
		switch {
		case len(r.Args) == 0:
			return fmt.Sprintf("the rule %s matches that command exactly and takes no extra argument, not even %q", quoteList(r.Written()), a)
		case Plain(a):
			return fmt.Sprintf("the extra argument %q matches none of %s", a, quoteList(r.Args))
		default:
			return fmt.Sprintf("the extra argument %q starts with \"-\" or holds \"=\", and no pattern of %s names it", a, quoteList(r.Args))
		}
	}
	return ""
}

// Plain reports whether an argument is a plain one: not empty, not an
// option (a leading "-") and not an assignment (an "=").
func Plain(a string) bool {
	return a != "" && !strings.HasPrefix(a, "-") && !strings.Contains(a, "=")
}

// ArgMatches reports whether the extra argument a matches pattern p:
// AnyPlain matches a plain argument, a pattern ending in "*" an argument
// that starts with what comes before the "*", any other pattern only
// itself.
func ArgMatches(p, a string) bool {
	switch {
	case p == AnyPlain:
		return Plain(a)
	case strings.HasSuffix(p, "*"):
		return strings.HasPrefix(a, strings.TrimSuffix(p, "*"))
	}
	return a == p
}

// quoteList renders a list as TOML does, for messages.
func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// checkMCP refuses a rule that would allow more than it says, or that
// cannot be read one way only: an empty rule allows everything, an empty
// element matches only an empty argument, a NUL can never reach exec,
// and "..." anywhere but at a rule's end would leave unsaid where the
// rule's own elements are.
func (h Home) checkMCP(c Config) error {
	bad := func(format string, a ...any) error {
		return errs.New(errs.EINVAL, "%s: [mcp] %s", h.Config(), fmt.Sprintf(format, a...))
	}
	for i, rule := range c.MCP.TaskAllow {
		where := fmt.Sprintf("task_allow rule %d %s", i+1, quoteList(rule))
		if len(rule) == 0 || (len(rule) == 1 && rule[0] == AnyPlain) {
			return bad("%s names no command (it would allow every command)", where)
		}
		for j, a := range rule {
			if err := checkElement(a); err != "" {
				return bad("%s: element %d %s", where, j+1, err)
			}
			if a == AnyPlain && j != len(rule)-1 {
				return bad("%s: \"...\" may only end a rule (it lets the rule take more plain arguments)", where)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.MCP.Tasks)) {
		t := c.MCP.Tasks[name]
		where := fmt.Sprintf("tasks.%s", name)
		if len(name) > MaxTaskName || !taskName.MatchString(name) {
			return bad("%s: a task's name is up to %d letters, digits, '_', '.' or '-', starting with a letter or digit", where, MaxTaskName)
		}
		if len(t.Argv) == 0 {
			return bad("%s has no argv: the command it runs", where)
		}
		for j, a := range t.Argv {
			if err := checkElement(a); err != "" {
				return bad("%s: argv element %d %s", where, j+1, err)
			}
			if a == AnyPlain {
				return bad("%s: argv is the command whole; the extra arguments it takes go in args", where)
			}
		}
		for j, p := range t.Args {
			if err := checkElement(p); err != "" {
				return bad("%s: args pattern %d %s", where, j+1, err)
			}
			if p == "*" {
				return bad("%s: args pattern \"*\" names no argument (it would let through any, -exec and --eval= too): name each option the task takes", where)
			}
		}
		if !utf8.ValidString(t.Summary) || strings.ContainsRune(t.Summary, 0) {
			return bad("%s: summary is not text", where)
		}
		if w := t.WakesPerHour; w != nil && (*w < 1 || *w > taskcmd.MaxWakesPerHour) {
			return bad("%s: wakes_per_hour is %d; it must be between 1 and %d", where, *w, taskcmd.MaxWakesPerHour)
		}
	}
	return nil
}

// checkElement says what is wrong with a rule's element ("" when
// nothing is).
func checkElement(a string) string {
	switch {
	case a == "":
		return "is empty"
	case strings.ContainsRune(a, 0) || !utf8.ValidString(a):
		return fmt.Sprintf("%q holds a NUL or invalid UTF-8", a)
	}
	return ""
}
