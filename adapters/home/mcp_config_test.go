package home_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/internal/errs"
)

// A rule allows the whole command it names and nothing more: extra
// arguments only where the rule says ("..." for plain ones, a named
// task's args for the options it names). The review's three make
// escapes are refused by the spec's own example rule.
func TestTaskRulesMatchWholeCommands(t *testing.T) {
	m := home.MCP{
		TaskAllow: [][]string{{"make", "test"}, {"go", "test", "..."}},
		Tasks: map[string]home.NamedTask{
			"unit": {Argv: []string{"go", "test", "./..."}, Args: []string{"-v", "-run=*", "-count", "..."}},
		},
	}
	for _, c := range []struct {
		argv []string
		want string // the rule's name or its first elements; "" refused
	}{
		{[]string{"make", "test"}, "make"},
		{[]string{"make", "test", "--eval=$(shell id -u > pwned)"}, ""},
		{[]string{"make", "test", "-f", "FILE"}, ""},
		{[]string{"make", "test", "SHELL=/tmp/x"}, ""},
		{[]string{"make", "test", "install"}, ""},
		{[]string{"make", "tests"}, ""},
		{[]string{"make"}, ""},
		{[]string{"/usr/bin/make", "test"}, ""},
		{[]string{"go", "test"}, "go"},
		{[]string{"go", "test", "./pkg/a", "./pkg/b"}, "go"},
		{[]string{"go", "test", "-exec", "sh"}, ""},
		{[]string{"go", "test", "-toolexec=x"}, ""},
		{[]string{"go", "test", "GOFLAGS=x"}, ""},
		{[]string{"go", "test", ""}, ""},
		{[]string{"go", "test", "./...", "-v", "-run=TestX", "-count", "1"}, "unit"},
		{[]string{"go", "test", "./...", "-exec=sh"}, ""},
	} {
		r, ok := m.Allowed(c.argv)
		got := ""
		if ok {
			got = r.Name
			if got == "" {
				got = r.Argv[0]
			}
		}
		if got != c.want {
			t.Errorf("%q: allowed by %q, want %q", c.argv, got, c.want)
		}
	}
	if r, _ := m.Task("unit"); r.Why([]string{"go", "test", "./...", "-x"}) == "" {
		t.Error("a named task let through an option it does not name")
	}
	if r, ok := m.Closest([]string{"make", "test", "-f", "F"}); !ok || !strings.Contains(r.Why([]string{"make", "test", "-f", "F"}), "exactly") {
		t.Errorf("the closest rule's reason: %+v %q", r, r.Why([]string{"make", "test", "-f", "F"}))
	}
}

// Rules that cannot be read one way only, or that name no command, make
// the configuration invalid: EINVAL naming the file and the rule.
func TestTaskRulesBadInput(t *testing.T) {
	for _, c := range []struct{ name, file, want string }{
		{"empty rule", "[mcp]\ntask_allow = [[]]\n", "names no command"},
		{"only dots", "[mcp]\ntask_allow = [[\"...\"]]\n", "names no command"},
		{"empty element", "[mcp]\ntask_allow = [[\"make\", \"\"]]\n", "is empty"},
		{"dots in the middle", "[mcp]\ntask_allow = [[\"go\", \"...\", \"test\"]]\n", "may only end a rule"},
		{"a non-string", "[mcp]\ntask_allow = [[\"make\", 1]]\n", "task_allow"},
		{"a named task without argv", "[mcp.tasks.test]\nargs = [\"-v\"]\n", "has no argv"},
		{"dots in a named task's argv", "[mcp.tasks.test]\nargv = [\"go\", \"...\"]\n", "go in args"},
		{"a star naming everything", "[mcp.tasks.test]\nargv = [\"go\", \"test\"]\nargs = [\"*\"]\n", "names no argument"},
		{"a bad name", "[mcp.tasks.\"a b\"]\nargv = [\"go\"]\n", "name"},
		{"an unknown key", "[mcp.tasks.test]\nargv = [\"go\"]\nwake = 3\n", "wake"},
		{"a wake bound of 0", "[mcp.tasks.dev]\nargv = [\"npm\", \"run\", \"dev\"]\nwakes_per_hour = 0\n", "wakes_per_hour is 0"},
		{"a wake bound over 600", "[mcp.tasks.dev]\nargv = [\"npm\", \"run\", \"dev\"]\nwakes_per_hour = 601\n", "wakes_per_hour is 601"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := home.Home{Root: t.TempDir()}
			if err := os.WriteFile(filepath.Join(h.Root, "config.toml"), []byte(c.file), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := h.LoadConfig(func(string) string { return "" })
			if errs.CodeOf(err) != errs.EINVAL || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), h.Config()) {
				t.Fatalf("got %v, want EINVAL naming the file and %q", err, c.want)
			}
		})
	}
}

// A named task carries its own wake bound; every other rule has the
// default.
func TestTaskRuleWakeBound(t *testing.T) {
	h := home.Home{Root: t.TempDir()}
	file := "[mcp]\ntask_allow = [[\"make\", \"test\"]]\n[mcp.tasks.dev]\nargv = [\"npm\", \"run\", \"dev\"]\nwakes_per_hour = 12\n[mcp.tasks.logs]\nargv = [\"tail\", \"-f\", \"log\"]\n"
	if err := os.WriteFile(filepath.Join(h.Root, "config.toml"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := h.LoadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := cfg.MCP.Task("dev")
	logs, _ := cfg.MCP.Task("logs")
	mk, _ := cfg.MCP.Allowed([]string{"make", "test"})
	if dev.WakesPerHour != 12 || logs.WakesPerHour != 6 || mk.WakesPerHour != 6 {
		t.Fatalf("wake bounds: dev %d, logs %d, make test %d; want 12, 6, 6", dev.WakesPerHour, logs.WakesPerHour, mk.WakesPerHour)
	}
}
