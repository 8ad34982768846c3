package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/alecthomas/kong"
)

// The README and spec/*.md name tests as their evidence and show cbth
// command lines as what to type. These tests hold both to the code: a
// renamed test, a removed command or flag, or a typo in a doc fails here
// rather than on a reader's terminal.

// docFiles are the documents checked, relative to the module root.
func docFiles(t *testing.T) []string {
	t.Helper()
	specs, err := filepath.Glob(filepath.Join("..", "..", "spec", "*.md"))
	if err != nil || len(specs) == 0 {
		t.Fatalf("no spec/*.md: %v", err)
	}
	return append([]string{filepath.Join("..", "..", "README.md")}, specs...)
}

// moduleTests is every Test, Benchmark and Fuzz function declared in the
// module's *_test.go files.
func moduleTests(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join("..", ".."), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "node_modules", "testdata", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && testName.MatchString(fn.Name.Name) {
				names[fn.Name.Name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 100 {
		t.Fatalf("only %d tests found: the walk missed the module", len(names))
	}
	return names
}

// testName is a test function's name; testCite is one cited in a doc,
// where a trailing * stands for every test with that prefix.
var (
	testName = regexp.MustCompile(`^(Test|Benchmark|Fuzz)[A-Z0-9_]\w*$`)
	testCite = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z0-9_]\w*\*?`)
)

// lineOf is the 1-based line of offset off in text.
func lineOf(text string, off int) int { return strings.Count(text[:off], "\n") + 1 }

// Every test a doc cites exists.
func TestDocsCiteRealTests(t *testing.T) {
	t.Parallel()
	tests := moduleTests(t)
	cited := 0
	for _, path := range docFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range testCite.FindAllStringIndex(text, -1) {
			cite := text[m[0]:m[1]]
			cited++
			if prefix, ok := strings.CutSuffix(cite, "*"); ok {
				if !anyWithPrefix(tests, prefix) {
					t.Errorf("%s:%d: %s: no test has this prefix", docName(path), lineOf(text, m[0]), cite)
				}
				continue
			}
			if !tests[cite] {
				t.Errorf("%s:%d: %s: no such test in the module", docName(path), lineOf(text, m[0]), cite)
			}
		}
	}
	if cited < 50 {
		t.Fatalf("only %d test names cited: the scan missed the docs", cited)
	}
}

func anyWithPrefix(names map[string]bool, prefix string) bool {
	for n := range names {
		if strings.HasPrefix(n, prefix) {
			return true
		}
	}
	return false
}

// docName is path relative to the module root, for messages.
func docName(path string) string { return strings.TrimPrefix(filepath.ToSlash(path), "../../") }

// snippet is a piece of code a doc shows: a fenced block's line (its \
// continuations joined) or an inline code span.
type snippet struct {
	line   int
	text   string
	inline bool // a code span of the prose, not a code block's line
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// snippets splits a markdown text into its code: each line of a fenced
// block but a text block (output), and each inline span of the prose (a
// span may wrap a line, not a paragraph).
func snippets(text string) []snippet {
	var out []snippet
	lines := strings.Split(text, "\n")
	inFence, output := false, false
	var para []string
	paraStart := 0
	flush := func() {
		p := strings.Join(para, "\n")
		for _, m := range codeSpan.FindAllStringSubmatchIndex(p, -1) {
			out = append(out, snippet{paraStart + lineOf(p, m[0]), strings.ReplaceAll(p[m[2]:m[3]], "\n", " "), true})
		}
		para = nil
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if fence, ok := strings.CutPrefix(strings.TrimSpace(l), "```"); ok {
			flush()
			inFence = !inFence
			// A block tagged text is what a command printed, not
			// what to type.
			output = inFence && strings.TrimSpace(fence) == "text"
			continue
		}
		if output {
			continue
		}
		if inFence {
			start := i + 1
			for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
				i++
				l = strings.TrimSuffix(l, `\`) + " " + lines[i]
			}
			out = append(out, snippet{start, stripComment(l), false})
			continue
		}
		if strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		if para == nil {
			paraStart = i
		}
		para = append(para, l)
	}
	flush()
	return out
}

// stripComment cuts a shell comment off a code block's line: a # that
// starts a word outside quotes, to the end of the line.
func stripComment(l string) string {
	var quote rune
	prev := ' '
	for i, r := range l {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '#' && (prev == ' ' || prev == '\t'):
			return l[:i]
		}
		prev = r
	}
	return l
}

// cbthCall finds where cbth is run in a snippet: the word cbth at the
// start, after a space or an opening parenthesis, followed by a space.
var cbthCall = regexp.MustCompile(`(?:^|[\s(])cbth[ \t]+`)

// shellWords splits what follows cbth into words the way a shell would
// (quotes kept together), up to the end of the command: a pipe, ;, &, a
// closing parenthesis, a redirection, a backtick or a comment.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case strings.ContainsRune("|;&)<>`", r), r == '#' && !inWord:
			if inWord {
				words = append(words, w.String())
			}
			return words
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// commandWord is a word that can only be meant as a command name; other
// words after a command group (COMMAND, <id>, …, $X) are placeholders.
var commandWord = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// checkCall walks words down the command tree from root and says what in
// them the tree does not have: a command, or a flag of the command it
// follows (its own, an enclosing command's, or a global one).
func checkCall(root *kong.Node, words []string) []string {
	var problems []string
	n := root
	path := "cbth"
	atLeaf := false
	for i := 0; i < len(words); i++ {
		w := strings.TrimLeft(words[i], "([")
		w = strings.TrimRight(w, "])…,.:")
		w = strings.TrimSuffix(w, "...")
		switch {
		case w == "":
			continue
		case w == "--", w == "/":
			return problems // the command's own arguments, or prose's "or"
		case strings.HasPrefix(w, "-"):
			name, _, hasValue := strings.Cut(w, "=")
			f, known := findFlag(n, name)
			if !known {
				if isFlagName(name) {
					problems = append(problems, fmt.Sprintf("%s has no flag %s", path, name))
				}
				continue
			}
			// A flag before the command's last word takes its value
			// with it, so the value is not read as a command.
			if !atLeaf && f != nil && !hasValue && !f.IsBool() && !f.IsCounter() {
				i++
			}
		case atLeaf:
			if hasPassthrough(n) {
				return problems // the rest belongs to the command it runs
			}
		default:
			child := findChild(n, w)
			if child == nil {
				if commandWord.MatchString(w) && len(n.Positional) == 0 {
					problems = append(problems, fmt.Sprintf("%s has no command %q", path, w))
				}
				if len(n.Children) > 0 {
					return problems // a placeholder: nothing after it can be placed
				}
				atLeaf = true
				continue
			}
			n = child
			if child.Type == kong.CommandNode {
				path += " " + child.Name
			}
			atLeaf = len(n.Children) == 0
		}
	}
	return problems
}

// isFlagName is a word that can only be meant as a flag: --name or -x.
func isFlagName(w string) bool { return flagWord.MatchString(w) }

var flagWord = regexp.MustCompile(`^(--[a-z][a-z0-9-]*|-[a-zA-Z])$`)

// findFlag looks name up on n, the commands enclosing it and, for a group
// run without a subcommand, its default command. A nil flag with true is
// kong's own help flag.
func findFlag(n *kong.Node, name string) (*kong.Flag, bool) {
	if name == "-h" || name == "--help" {
		return nil, true
	}
	nodes := []*kong.Node{}
	for p := n; p != nil; p = p.Parent {
		nodes = append(nodes, p)
	}
	if n.DefaultCmd != nil {
		nodes = append(nodes, n.DefaultCmd)
	}
	for _, p := range nodes {
		for _, f := range p.Flags {
			if flagMatches(f, name) {
				return f, true
			}
		}
	}
	return nil, false
}

func flagMatches(f *kong.Flag, name string) bool {
	if long, ok := strings.CutPrefix(name, "--"); ok {
		if long == f.Name || (f.Tag.Negatable != "" && long == "no-"+f.Name) {
			return true
		}
		for _, a := range f.Aliases {
			if long == a {
				return true
			}
		}
		return false
	}
	return len(name) == 2 && f.Short != 0 && rune(name[1]) == f.Short
}

// findChild is n's subcommand named w, or its argument node (a command
// whose first word is a value).
func findChild(n *kong.Node, w string) *kong.Node {
	var arg *kong.Node
	for _, c := range n.Children {
		if c.Type == kong.ArgumentNode {
			arg = c
			continue
		}
		if c.Name == w {
			return c
		}
		for _, a := range c.Aliases {
			if a == w {
				return c
			}
		}
	}
	return arg
}

func hasPassthrough(n *kong.Node) bool {
	for _, p := range n.Positional {
		if p.PassthroughMode != kong.PassThroughModeNone {
			return true
		}
	}
	return false
}

// commandTree is the whole kong model cbth parses with.
func commandTree(t *testing.T) *kong.Node {
	t.Helper()
	p, err := kong.New(&CLI{}, kong.Name("cbth"), kong.ExplicitGroups(groups), cliVars())
	if err != nil {
		t.Fatal(err)
	}
	return p.Model.Node
}

// Every cbth command line a doc shows, in a code block or an inline code
// span, names commands that exist and gives each only flags it has.
func TestDocsCiteRealCommands(t *testing.T) {
	t.Parallel()
	root := commandTree(t)
	calls := 0
	for _, path := range docFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range snippets(string(b)) {
			for _, m := range cbthCall.FindAllStringIndex(s.text, -1) {
				calls++
				for _, p := range checkCall(root, shellWords(s.text[m[1]:])) {
					t.Errorf("%s:%d: %s\n\t%s", docName(path), s.line, p, strings.TrimSpace(s.text))
				}
			}
		}
	}
	if calls < 200 {
		t.Fatalf("only %d cbth command lines found: the scan missed the docs", calls)
	}
}

// mdLink is a markdown link's target: a path, an anchor or both.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// anchors are the ids GitHub gives a markdown file's headings: lower
// case, punctuation dropped, spaces made hyphens, a repeat numbered.
func anchors(text string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(l, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var id strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				id.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				id.WriteRune(r)
			}
		}
		a := id.String()
		if n := seen[a]; n > 0 {
			ids[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			ids[a] = true
		}
		seen[a]++
	}
	return ids
}

// Every link between the docs reaches a file that exists and, with an
// anchor, a heading in it.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	links := 0
	for _, path := range docFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, m := range mdLink.FindAllStringSubmatchIndex(text, -1) {
			target := text[m[2]:m[3]]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, anchor, _ := strings.Cut(target, "#")
			dest := path
			if file != "" {
				dest = filepath.Join(filepath.Dir(path), file)
			}
			db, err := os.ReadFile(dest)
			if err != nil {
				t.Errorf("%s:%d: link %s: %v", docName(path), lineOf(text, m[0]), target, err)
				continue
			}
			if anchor != "" && !anchors(string(db))[anchor] {
				t.Errorf("%s:%d: link %s: %s has no heading with that anchor", docName(path), lineOf(text, m[0]), target, docName(dest))
			}
		}
	}
	if links < 10 {
		t.Fatalf("only %d links found: the scan missed the docs", links)
	}
}

// The checker itself: what it must refuse and what it must let through.
func TestDocsCheckerCatchesBadCalls(t *testing.T) {
	t.Parallel()
	root := commandTree(t)
	for line, want := range map[string]string{
		"cbth job submit --target cli --thread-id T":       "",
		"cbth --json job submit --thread-id=T":             "",
		"cbth --home DIR job list --limit 5":               "",
		"cbth task logs -f T":                              "",
		"cbth task run --target cli -- make test --nope":   "",
		"cbth COMMAND --help":                              "",
		"cbth desktop …":                                   "",
		"cbth job submitt --target cli":                    `cbth job has no command "submitt"`,
		"cbth jobs list":                                   `cbth has no command "jobs"`,
		"cbth job submit --thread T":                       "cbth job submit has no flag --thread",
		"cbth batch close-head --source-thread-id T -z":    "cbth batch close-head has no flag -z",
		"cbth job query J --json --no-such":                "cbth job query has no flag --no-such",
		"cbth wait (--job-id J)... [--timeout D]":          "",
		"cbth wait [--job-id J] [--time-out D]":            "cbth wait has no flag --time-out",
		"cbth desktop installation-state --json":           "",
		"cbth events export / replay --until T":            "",
		"cbth desktop installation-state repair --nothing": "cbth desktop installation-state repair has no flag --nothing",
	} {
		var got []string
		for _, m := range cbthCall.FindAllStringIndex(line, -1) {
			got = append(got, checkCall(root, shellWords(line[m[1]:]))...)
		}
		sort.Strings(got)
		if strings.Join(got, "; ") != want {
			t.Errorf("%q: got %q, want %q", line, got, want)
		}
	}
}

// proseFlag is a code span of the prose that names a flag on its own:
// `--name`, `--name VALUE`, `--name=VALUE`.
var proseFlag = regexp.MustCompile(`^(--[a-z][a-z0-9-]*)(?:[ =]|$)`)

// foreignFlags are flags the docs name that belong to other programs,
// each with the program: the docs check cannot tell whose a lone flag is,
// so one missing from cbth must be listed here.
var foreignFlags = map[string]string{
	"--name":                  "kong's flag syntax itself (spec/cli.md)",
	"--list":                  "cbth-providers",
	"--check-credential":      "cbth-providers",
	"--experimental":          "codex app-server generate-json-schema",
	"--listen":                "codex app-server",
	"--ws-auth":               "codex app-server",
	"--remote":                "codex",
	"--remote-auth-token-env": "codex",
	"--no-daemon":             "codex",
	"--resume":                "codex queue",
	"--thread":                "codex queue",
	"--message":               "codex queue",
	"--cd":                    "codex",
	"--image":                 "codex",
	"--no-alt-screen":         "codex",
	"--strict-config":         "codex",
}

// everyFlag is the name of every flag of every cbth command (--name, and
// --no-name for a negatable one).
func everyFlag(n *kong.Node, into map[string]bool) {
	for _, f := range n.Flags {
		into["--"+f.Name] = true
		if f.Tag.Negatable != "" {
			into["--no-"+f.Name] = true
		}
		for _, a := range f.Aliases {
			into["--"+a] = true
		}
	}
	for _, c := range n.Children {
		everyFlag(c, into)
	}
}

// A flag the prose names on its own (`--name`, outside a cbth command
// line) is a flag some cbth command has, or another program's that
// foreignFlags lists: a flag removed from the binary cannot live on in
// the docs' prose.
func TestDocsProseNamesRealFlags(t *testing.T) {
	t.Parallel()
	flags := map[string]bool{}
	everyFlag(commandTree(t), flags)
	named := 0
	for _, path := range docFiles(t) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		n, problems := proseFlagProblems(flags, string(b))
		named += n
		for _, p := range problems {
			t.Errorf("%s:%s", docName(path), p)
		}
	}
	if named < 50 {
		t.Fatalf("only %d flags named in prose: the scan missed the docs", named)
	}
}

// proseFlagProblems checks the flags text's prose names on their own
// against flags and foreignFlags: how many it named, and each unknown
// one as "LINE: problem".
func proseFlagProblems(flags map[string]bool, text string) (named int, problems []string) {
	for _, s := range snippets(text) {
		m := proseFlag.FindStringSubmatch(s.text)
		if !s.inline || m == nil {
			continue
		}
		named++
		if !flags[m[1]] && foreignFlags[m[1]] == "" {
			problems = append(problems, fmt.Sprintf("%d: %s is no flag of any cbth command (nor listed in foreignFlags)", s.line, m[1]))
		}
	}
	return named, problems
}

// The prose check itself: a removed flag named in prose is caught; a
// flag cbth has, another program's listed one and a flag inside a code
// block are let through.
func TestDocsProseCheckerCatchesRemovedFlags(t *testing.T) {
	t.Parallel()
	flags := map[string]bool{}
	everyFlag(commandTree(t), flags)
	for text, want := range map[string]string{
		"`--rotate-artifact-leases` acts now.":                "1: --rotate-artifact-leases is no flag of any cbth command (nor listed in foreignFlags)",
		"Give `--as-of TIME` or `--seq N`.":                   "",
		"`--no-daemon` is codex's.":                           "",
		"```\ncodex --whatever\n```":                          "",
		"one\n\nand `--source-thread-id=T`, then `--nope=1`.": "3: --nope is no flag of any cbth command (nor listed in foreignFlags)",
	} {
		_, got := proseFlagProblems(flags, text)
		if strings.Join(got, "; ") != want {
			t.Errorf("%q: got %q, want %q", text, got, want)
		}
	}
}

// The README's two commands are the ones CI and the justfile run: its
// test command (the first `go test` line of its code) is what .ci/run
// runs, with -json, piped through testreport (which passes on what plain
// go test prints and fails on a skip .ci/skips does not allow), and the
// justfile's recipes run both as written. A README that names another
// test command than CI's, or a CI that runs less, fails here.
func TestCIRunsTheREADMEsCommands(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	testCmd, demoCmd := readmeCommands(string(readme))
	if testCmd == "" || demoCmd == "" {
		t.Fatalf("README.md shows no `go test` or no `go run` command in its code (got %q, %q)", testCmd, demoCmd)
	}
	ci, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !ciRuns(string(ci), testCmd) {
		t.Errorf(".ci/run has no line running the README's test command %q (with -json) through testreport", testCmd)
	}
	just, err := os.ReadFile(filepath.Join("..", "..", "justfile"))
	if err != nil {
		t.Fatal(err)
	}
	recipes := map[string]bool{}
	for _, l := range strings.Split(string(just), "\n") {
		if strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") {
			recipes[strings.TrimSpace(l)] = true
		}
	}
	for _, c := range []string{testCmd, demoCmd} {
		if !recipes[c] {
			t.Errorf("the justfile has no recipe line %q (the README's command)", c)
		}
	}
}

// readmeCommands are the first `go test` and `go run` lines of a doc's
// code blocks, their comments cut.
func readmeCommands(text string) (testCmd, demoCmd string) {
	for _, s := range snippets(text) {
		l := strings.Join(strings.Fields(s.text), " ")
		switch {
		case s.inline:
		case testCmd == "" && strings.HasPrefix(l, "go test "):
			testCmd = l
		case demoCmd == "" && strings.HasPrefix(l, "go run "):
			demoCmd = l
		}
	}
	return testCmd, demoCmd
}

// ciRuns reports whether a shell script has a command line that runs
// testCmd with -json added and pipes it into testreport.
func ciRuns(script, testCmd string) bool {
	want := strings.Fields(testCmd)
	for _, l := range strings.Split(script, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") {
			continue
		}
		left, right, piped := strings.Cut(l, "|")
		if !piped || !strings.Contains(right, "testreport") {
			continue
		}
		words := strings.Fields(left)
		json := slices.Index(words, "-json")
		if json < 0 {
			continue
		}
		if slices.Equal(slices.Delete(words, json, json+1), want) {
			return true
		}
	}
	return false
}

// The CI check itself: the line .ci/run has passes; a narrower package
// pattern, a missing -json, a missing testreport and a commented line
// do not.
func TestCIRunsCheckerCatchesAnotherCommand(t *testing.T) {
	t.Parallel()
	for script, want := range map[string]bool{
		`go test -json ./... | "$report/testreport" -allow .ci/skips`:     true,
		`go test -json ./cmd/... | "$report/testreport" -allow .ci/skips`: false,
		`go test ./... | "$report/testreport" -allow .ci/skips`:           false,
		`go test -json ./... | tee log`:                                   false,
		`# go test -json ./... | "$report/testreport"`:                    false,
		"go test -json ./...\n":                                           false,
	} {
		if got := ciRuns(script, "go test ./..."); got != want {
			t.Errorf("%q: ciRuns %v, want %v", script, got, want)
		}
	}
}
