package main_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/engine/command"
)

// specTargets reads spec/cli.md's target table (the one after the
// <!-- targets --> marker) as rows of cells, backquotes dropped.
func specTargets(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "spec", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "<!-- targets -->\n")
	if !ok {
		t.Fatal("spec/cli.md has no <!-- targets --> table")
	}
	var rows [][]string
	for i, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if i < 2 { // the header and its rule
			continue
		}
		var row []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			row = append(row, strings.Trim(strings.TrimSpace(c), "`"))
		}
		rows = append(rows, row)
	}
	return rows
}

// The targets are one list (command.Targets): spec/cli.md's table says
// what it says, and the real binary's `--target` help, completion and
// check follow it.
func TestSpecTargetsMatchTheList(t *testing.T) {
	t.Parallel()
	yes := map[bool]string{true: "yes", false: "no"}
	var want [][]string
	for _, i := range command.Targets() {
		want = append(want, []string{string(i.Target), yes[i.Flag], yes[i.ThreadRoute], i.Delivers})
	}
	got := specTargets(t)
	if len(got) != len(want) {
		t.Errorf("spec/cli.md lists %d targets, the code %d:\n%q\n%q", len(got), len(want), got, want)
	}
	for i := range min(len(got), len(want)) {
		if strings.Join(got[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("spec/cli.md target row %d is %q, the code says %q", i+1, got[i], want[i])
		}
	}

	h := newHome(t)
	for _, verb := range [][]string{{"job", "submit"}, {"task", "run"}} {
		r := h.run(append(verb, "--help")...)
		line := "COMP_LINE=cbth " + strings.Join(verb, " ") + " --target "
		c := h.cmd()
		c.Env = append(c.Env, line, "COMP_POINT="+strconv.Itoa(len(line)-len("COMP_LINE=")))
		comp, err := c.Output()
		if err != nil {
			t.Fatalf("%v completion: %v", verb, err)
		}
		offered := strings.Fields(string(comp))
		_, placeholder, _ := strings.Cut(r.stdout, "--target=")
		placeholder, _, _ = strings.Cut(placeholder, " ")
		placeholder = strings.TrimSpace(placeholder)
		shown := strings.Split(placeholder, "|")
		for _, i := range command.Targets() {
			if in := slices.Contains(shown, string(i.Target)); in != i.Flag {
				t.Errorf("%v --help shows --target=%s: %s there is %v, want %v", verb, placeholder, i.Target, in, i.Flag)
			}
			if in := slices.Contains(offered, string(i.Target)); in != i.Flag {
				t.Errorf("%v completion of --target offers %q: %s there is %v, want %v", verb, offered, i.Target, in, i.Flag)
			}
		}
	}
	// A target --target may not name is refused before anything is sent:
	// no home, no daemon, no log.
	for _, bad := range []string{"codex_app_server", "cli ", "CLI", "nowhere"} {
		r := h.run("job", "submit", "--target", bad, "--thread-id", "T", "--task-kind", "k", "--summary", "s", "--json")
		if r.code != 2 || !strings.Contains(r.stdout, `"EINVAL"`) {
			t.Errorf("--target %q: exit %d %s%s, want 2 EINVAL", bad, r.code, r.stdout, r.stderr)
		}
	}
	if _, err := os.Stat(h.root); !os.IsNotExist(err) {
		t.Errorf("a refused --target left the home %s behind (%v)", h.root, err)
	}
}
