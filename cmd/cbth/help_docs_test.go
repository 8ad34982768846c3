package main_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// helpGroup is one section of the first help screen: its title and its
// commands, in order.
type helpGroup struct {
	title    string
	commands []string
}

// helpGroups reads the groups `cbth --help` prints: after the global
// flags, each title line ends with a colon and each command line is
// indented two spaces (a wrapped help text is indented further).
func helpGroups(t *testing.T, out string) []helpGroup {
	t.Helper()
	var gs []helpGroup
	inFlags := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case l == "Flags:":
			inFlags = true
		case l == "":
		case !strings.HasPrefix(l, " ") && strings.HasSuffix(l, ":"):
			inFlags = false
			gs = append(gs, helpGroup{title: strings.TrimSuffix(l, ":")})
		case !inFlags && len(gs) > 0 && strings.HasPrefix(l, "  ") && l[2] != ' ':
			g := &gs[len(gs)-1]
			g.commands = append(g.commands, strings.Fields(l)[0])
		}
	}
	if len(gs) < 5 {
		t.Fatalf("cbth --help: only %d groups read:\n%s", len(gs), out)
	}
	return gs
}

var backticked = regexp.MustCompile("`([^`]+)`")

// docGroups reads a doc's table of the help's groups: the table whose
// header is `| group | commands |`, one row per group, the commands in
// backticks.
func docGroups(t *testing.T, name string) []helpGroup {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if err != nil {
		t.Fatal(err)
	}
	var gs []helpGroup
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		switch {
		case !strings.HasPrefix(l, "|"):
			in = false
		case len(cells) == 2 && strings.TrimSpace(cells[0]) == "group" && strings.TrimSpace(cells[1]) == "commands":
			in = true
		case in && !strings.HasPrefix(l, "|--") && !strings.HasPrefix(l, "|:") && !strings.HasPrefix(l, "|---"):
			g := helpGroup{title: strings.TrimSpace(cells[0])}
			for _, m := range backticked.FindAllStringSubmatch(cells[len(cells)-1], -1) {
				g.commands = append(g.commands, m[1])
			}
			gs = append(gs, g)
		}
	}
	if len(gs) == 0 {
		t.Fatalf("%s has no table headed | group | commands |", name)
	}
	return gs
}

// The first help screen's groups and their commands are the ones
// spec/cli.md and the README list, in the same order, install in the
// first.
func TestHelpGroupsMatchTheDocs(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	r := h.run("--help")
	if r.code != 0 {
		t.Fatalf("cbth --help: exit %d %s", r.code, r.stderr)
	}
	help := helpGroups(t, r.stdout)
	// The first step a newcomer takes heads the first screen.
	if !slices.Contains(help[0].commands, "install") {
		t.Errorf("cbth --help's first group %q holds %v, not install", help[0].title, help[0].commands)
	}
	for _, doc := range []string{"spec/cli.md", "README.md"} {
		got := docGroups(t, doc)
		if !slices.EqualFunc(got, help, func(a, b helpGroup) bool {
			return a.title == b.title && slices.Equal(a.commands, b.commands)
		}) {
			t.Errorf("%s lists the help's groups as\n%v\ncbth --help prints\n%v", doc, got, help)
		}
	}
}

// versionLine is how cbth --version prints itself (a doc may wrap it).
var versionLine = regexp.MustCompile(`cbth\s+\d+\.\d+\.\d+\s+\(protocol\s+\d+\)`)

// A version line the README or spec/cli.md quotes is the one this cbth
// prints.
func TestDocsQuoteTheCurrentVersion(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	r := h.run("--version")
	want := strings.TrimSpace(r.stdout)
	if r.code != 0 || !versionLine.MatchString(want) {
		t.Fatalf("cbth --version: exit %d %q", r.code, r.stdout)
	}
	quoted := 0
	for _, doc := range []string{"README.md", "spec/cli.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, got := range versionLine.FindAllString(string(b), -1) {
			quoted++
			got = strings.Join(strings.Fields(got), " ")
			if got != want {
				t.Errorf("%s quotes %q; cbth --version prints %q", doc, got, want)
			}
		}
	}
	if quoted == 0 {
		t.Fatal("neither the README nor spec/cli.md quotes the version line")
	}
}
