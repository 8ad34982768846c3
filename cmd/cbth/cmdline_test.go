package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	cortexcli "github.com/cbth-dev/cbth/adapters/cortexfs/cli"
	"github.com/cbth-dev/cbth/internal/cmdline"
)

// cbth parsed its command line with kong until kong's imports (os/user,
// go/doc, regexp, net/url) and its reflection over the whole tree were
// found costing every start of the binary. internal/cmdline replaced it,
// reading the same tags; these tests hold the two to the same result, with
// kong as a test-only dependency.
//
// What must agree, for every line: whether it is accepted, asks for help,
// or is a usage error; the selected command; and the struct of every
// command on the selected path (the root's globals included), compared
// with reflect.DeepEqual after both parsed into a fresh CLI.
//
// Deliberate differences, not compared:
//   - Error and help wording. The messages follow kong's where the
//     meaning is the same ("unknown flag --x", "missing flags: ..."), but
//     help lists defaults and enum choices that kong's did not show, and
//     a usage error now prints the short usage after the error line.
//   - Defaults are applied to the commands on the selected path only;
//     kong also filled the structs of commands that were not selected.
//     Nothing reads those, so only the path is compared.
//   - "~/" in a type:"path" value is expanded from $HOME
//     (os.UserHomeDir); kong asked the password database (os/user). The
//     tests make the two agree by setting $HOME to kong's answer.
//   - The completion script lists --help once; kong's model had it twice.

type outcome struct {
	kind string // "ok", "help" or "error"
	path string // the selected command ("" for the root)
	vals []any  // the command structs on the path, subcommands zeroed
	err  string
}

func (o outcome) String() string {
	return fmt.Sprintf("%s %q %+v %s", o.kind, o.path, o.vals, o.err)
}

type kongExit struct{}

func parseKong(t testing.TB, args []string) (out outcome) {
	var cli CLI
	helpPath := ""
	p, err := kong.New(&cli, kong.Name("cbth"), kong.Writers(io.Discard, io.Discard),
		kong.Exit(func(int) { panic(kongExit{}) }),
		kong.Help(func(_ kong.HelpOptions, ctx *kong.Context) error {
			if n := ctx.Selected(); n != nil {
				helpPath = n.Path()
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(kongExit); !ok {
				panic(r)
			}
			out = outcome{kind: "help", path: helpPath}
		}
	}()
	ctx, err := p.Parse(args)
	if err != nil {
		return outcome{kind: "error", err: err.Error()}
	}
	path := ""
	if n := ctx.Selected(); n != nil {
		path = n.Path()
	}
	return outcome{kind: "ok", path: path, vals: pathValues(t, &cli, path)}
}

func parseMine(t testing.TB, args []string) outcome {
	var cli CLI
	res, err := app.Parse(&cli, args)
	if err != nil {
		if _, ok := err.(*cmdline.Error); !ok {
			t.Fatalf("%q: not a usage error: %v", args, err)
		}
		return outcome{kind: "error", err: err.Error()}
	}
	if res.Help {
		return outcome{kind: "help", path: res.Node.Path()}
	}
	return outcome{kind: "ok", path: res.Node.Path(), vals: pathValues(t, &cli, res.Node.Path())}
}

// pathValues copies the struct of each command on path, with the fields
// that hold subcommands zeroed, so only the path's own values compare.
func pathValues(t testing.TB, cli *CLI, path string) []any {
	root, err := app.Tree(cli)
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*cmdline.Node{root}
	if path != "" {
		n := root
	words:
		for _, w := range strings.Fields(path) {
			cs, _ := n.Children()
			for _, c := range cs {
				if c.Name == w {
					n = c
					nodes = append(nodes, n)
					continue words
				}
			}
			t.Fatalf("no command %q in %q", w, path)
		}
	}
	var out []any
	for _, n := range nodes {
		v := reflect.ValueOf(n.Target()).Elem()
		c := reflect.New(v.Type()).Elem()
		c.Set(v)
		for i := range c.NumField() {
			if _, ok := c.Type().Field(i).Tag.Lookup("cmd"); ok {
				c.Field(i).Set(reflect.Zero(c.Field(i).Type()))
			}
		}
		out = append(out, c.Interface())
	}
	return out
}

// sameHome points $HOME where kong's ExpandPath looks (the password
// database), so "~/" expands alike in both parsers.
func sameHome(t testing.TB) {
	home := filepath.Dir(kong.ExpandPath("~/x"))
	if h, err := os.UserHomeDir(); err != nil || h != home {
		t.Setenv("HOME", home)
	}
}

func compare(t testing.TB, args []string) (outcome, bool) {
	k := parseKong(t, args)
	m := parseMine(t, args)
	if k.kind != m.kind || k.path != m.path || !reflect.DeepEqual(k.vals, m.vals) {
		t.Errorf("%q:\nkong %v\nmine %v", args, k, m)
		return m, false
	}
	return m, true
}

// A hand-picked table of the forms kong accepts and rejects.
func TestParseMatchesKongTable(t *testing.T) {
	sameHome(t)
	for _, line := range []string{
		"",
		"--help",
		"-h",
		"--help=false",
		"--help=bogus",
		"--json",
		"version",
		"version --json",
		"--json version",
		"--json=yes version",
		"--json=nope version",
		"--home /h version",
		"--home=/h version",
		"--home version",
		"--home -x version",
		"--home=-x version",
		"version --home",
		"job",
		"job --help",
		"job submit --help",
		"job submit --help --bogus",
		"--help job submit",
		"job submit --target cli --thread-id t --task-kind k --summary s",
		"job submit --target=cli --thread-id=t --task-kind=k --summary=s --json",
		"job submit --target cli --thread-id t --task-kind k --summary s --metadata-file m.json",
		"job submit --target cli --thread-id t --task-kind k --summary s --metadata-file ~/m.json",
		"job submit --target cli --thread-id t --task-kind k --summary s --metadata-file=",
		"job submit --target cli --thread-id t --task-kind k --summary -s",
		"job submit --target cli --thread-id t --task-kind k --summary=-s",
		"job submit --target cli --thread-id t --task-kind k --summary -",
		"job submit --target cli --thread-id t --task-kind k --summary s --summary t",
		"job submit --target cli --thread-id t --task-kind k",
		"job --target cli submit --thread-id t --task-kind k --summary s",
		"job submit --target cli --thread-id t --task-kind k --summary s extra",
		"job submit --target cli --thread-id t --task-kind k --summary s --",
		"job submit --target cli --thread-id t --task-kind k --summary s -- --json",
		"job submit --target cli --thread-id t --task-kind k --summary --",
		"-- job submit --target cli",
		"-- version",
		"job query j",
		"job query -- -j",
		"job query -j",
		"job query",
		"job query j k",
		"job query submit",
		"job list --status running",
		"job list --status bogus",
		"job list --status=",
		"job list",
		"batch close-head --source-thread-id t --reason cancelled",
		"batch close-head --source-thread-id t --reason nope",
		"batch list --state parked",
		"wait --job-id a --job-id b,c --timeout 5s",
		"wait --job-id= ",
		"wait --job-id=",
		"wait --job-id a\\,b",
		"wait --job-id a,,b,",
		"wait --job-id ,",
		"wait --job-id -a",
		"wait --job-id=-a,b",
		"wait --job-id a,-b",
		"wait --job-id",
		"wait --timeout 0",
		"wait --timeout x",
		"wait --timeout -1s",
		"wait --timeout=-1s",
		"events export --from 0x10 --stream s --jsonl=false",
		"events export --from -1",
		"events export --from=-1",
		"events export --from 1_000",
		"events diff a b",
		"events diff a",
		"events diff - b",
		"events replay --until 5",
		"events tail -n 5 -f",
		"events tail -fn5",
		"events tail -n5",
		"events tail -n=5",
		"events tail -nf",
		"events tail -fh",
		"events tail -x",
		"events tail --n 0b101",
		"events tail -n",
		"artifact pin --artifact-id a --for 1h",
		"artifact pin --artifact-id a --until 2026-01-02T03:04:05Z",
		"artifact pin --artifact-id a --until 2026-01-02T03:04:05+01:00",
		"artifact pin --artifact-id a --until bad",
		"artifact pin --artifact-id a --for 1h --until 2026-01-02T03:04:05Z",
		"artifact pin --artifact-id a",
		"debug target --thread-id t deliver",
		"debug target --thread-id t nope",
		"debug target deliver",
		"debug clock --advance 1m",
		"completion bash",
		"completion tcsh",
		"completion",
		"completion --help",
		"ctx init --root r --runner /x",
		"ctx init --root=",
		"model add p/m --driver d --id i",
		"model add p/m --driver a,b --driver=c --id i --default k=v --cap chat --session socket --context-length 8",
		"model add p/m --driver d --id i --session nope",
		"model add p/m --driver= --id i --cap=",
		"model add p/m --id i",
		"model add --driver d --id i",
		"model alias main p/m --global",
		"model rm p/m",
		"model serve p/m",
		"model list",
		"install",
		"install --prefix /opt",
		"install --prefix rel",
		"install --prefix=",
		"install --prefix /a --prefix=",
		"install --prefix ~",
		"install --prefix -",
		"daemon stop --wait 3s",
		"daemon run --quiet",
		"daemon",
		"bogus",
		"--bogus",
		"---x version",
		"--=x version",
		"- version",
		"version -",
	} {
		compare(t, strings.Fields(line))
	}
	// Words with spaces, empty words and invalid UTF-8.
	for _, args := range [][]string{
		{"job", "submit", "--target", "", "--thread-id", "a b", "--task-kind", "k", "--summary", "\xff\xfeok"},
		{"job", "query", "\xed\xa0\x80"},
		{"wait", "--job-id", "a\xff,b"},
		{"model", "add", "p/m", "--driver", "a\xffb", "--id", "i"},
		{"artifact", "pin", "--artifact-id", "a", "--until", "2026-01-02T03:04:05Z\xff"},
		{"job", "list", "--status", "runn\xffing"},
		{"", "version"},
		{"version", ""},
		{"job", "query", ""},
		{"events", "tail", "-\xc3\xa9"},
	} {
		compare(t, args)
	}
}

// The generator's view of one command: its words and its values.
type genCmd struct {
	path  []string
	flags []*cmdline.Value
	args  []*cmdline.Value
}

func genCommands(t testing.TB) (leaves []genCmd) {
	root, err := app.Tree(&CLI{})
	if err != nil {
		t.Fatal(err)
	}
	var walk func(n *cmdline.Node, path []string, flags []*cmdline.Value)
	walk = func(n *cmdline.Node, path []string, flags []*cmdline.Value) {
		flags = append(append([]*cmdline.Value(nil), flags...), n.Flags...)
		cs, _ := n.Children()
		leaves = append(leaves, genCmd{path: path, flags: flags, args: n.Args})
		for _, c := range cs {
			walk(c, append(append([]string(nil), path...), c.Name), flags)
		}
	}
	walk(root, nil, nil)
	return leaves
}

var (
	genStrings   = []string{"x", "", "a b", "a=b", "=", "-", "-x", "--json", "--", "~/r.txt", "~", "rel/p", "/abs/p", "ünï", "\xff", "a,b", `a\,b`, "a,", ",", "true", "false"}
	genBools     = []string{"true", "false", "yes", "no", "1", "0", "TRUE", "", "maybe"}
	genDurations = []string{"10s", "0", "1h2m", "5m", "-1s", "x", "", "1"}
	genInts      = []string{"5", "0", "0x10", "1_000", "-3", "x", "", "99999999999999999999", "0b11", "07"}
	genTimes     = []string{"2026-01-02T03:04:05Z", "2026-01-02T03:04:05.5+02:00", "2026-01-02T03:04:05-07:00", "2030-12-31T23:59:59Z", "2026-01-02", "bad", ""}
	genExtras    = []string{"--help", "-h", "--bogus", "-z", "--", "pos", "-", "--json", "--json=false", "--home", "--home=/h", "--=", "-fn5", "-n"}
)

// genValue picks a value for v: any of a pool of awkward words, or with
// clean set one that a correct parser must accept.
func genValue(rng *rand.Rand, v *cmdline.Value, clean bool) string {
	if vals := v.EnumValues(); len(vals) > 0 && (clean || rng.IntN(3) > 0) {
		return vals[rng.IntN(len(vals))]
	}
	pool := genStrings
	t := v.Type()
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Bool:
		pool = genBools
	case t == reflect.TypeFor[time.Time]():
		pool = genTimes
	case t == reflect.TypeFor[time.Duration]():
		pool = genDurations
	case t.Kind() != reflect.String:
		pool = genInts
	}
	if clean {
		pool = pool[:4] // each pool starts with words every parser accepts
	}
	return pool[rng.IntN(len(pool))]
}

// genLine builds one command line over the whole tree: a command, most of
// its flags in every accepted spelling, sometimes a flag twice, out of
// place, unknown, or with a value that looks like a flag.
func genLine(rng *rand.Rand, leaves []genCmd) []string {
	c := leaves[rng.IntN(len(leaves))]
	// A third of the lines are clean: every required flag, acceptable
	// values, nothing out of place; they exercise the values more than
	// the errors.
	clean := rng.IntN(3) == 0
	var groups [][]string
	for _, f := range c.flags {
		if f.Name == "help" || rng.IntN(6) == 0 && !(clean && f.Required) {
			continue
		}
		times := 1
		if rng.IntN(12) == 0 {
			times = 2
		}
		for range times {
			v := genValue(rng, f, clean)
			switch {
			case f.IsBool() && rng.IntN(3) > 0:
				groups = append(groups, []string{"--" + f.Name})
			case f.IsBool():
				groups = append(groups, []string{"--" + f.Name + "=" + v})
			case f.Short != 0 && rng.IntN(3) == 0:
				groups = append(groups, []string{"-" + string(f.Short) + v})
			case f.Short != 0 && rng.IntN(2) == 0:
				groups = append(groups, []string{"-" + string(f.Short), v})
			case rng.IntN(2) == 0:
				groups = append(groups, []string{"--" + f.Name + "=" + v})
			default:
				groups = append(groups, []string{"--" + f.Name, v})
			}
		}
	}
	var args []string
	for _, a := range c.args {
		if clean || rng.IntN(10) > 0 {
			args = append(args, genValue(rng, a, clean))
		}
	}
	if !clean && rng.IntN(5) == 0 {
		args = append(args, genStrings[rng.IntN(len(genStrings))])
	}
	for range rng.IntN(3) {
		if !clean && rng.IntN(2) == 0 {
			groups = append(groups, []string{genExtras[rng.IntN(len(genExtras))]})
		}
	}
	rng.Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
	// Positional arguments go among the flags after the command words;
	// now and then a group moves in front of the command words, where
	// only the root's flags are accepted.
	line := append([]string(nil), c.path...)
	for _, a := range args {
		groups = append(groups, nil)
		k := rng.IntN(len(groups))
		copy(groups[k+1:], groups[k:])
		groups[k] = []string{a}
	}
	for _, g := range groups {
		if !clean && len(c.path) > 0 && rng.IntN(15) == 0 {
			k := rng.IntN(len(c.path) + 1)
			line = append(line[:k], append(append([]string(nil), g...), line[k:]...)...)
			continue
		}
		line = append(line, g...)
	}
	return line
}

func TestParseMatchesKongGenerated(t *testing.T) {
	sameHome(t)
	leaves := genCommands(t)
	rng := rand.New(rand.NewPCG(11, 17))
	const lines = 6000
	counts := map[string]int{}
	bad := 0
	for range lines {
		args := genLine(rng, leaves)
		o, ok := compare(t, args)
		counts[o.kind]++
		if !ok {
			if bad++; bad > 20 {
				t.FailNow()
			}
		}
	}
	// Without enough of each outcome the comparison proves little.
	for _, kind := range []string{"ok", "help", "error"} {
		if counts[kind] < lines/50 {
			t.Errorf("only %d %s lines of %d", counts[kind], kind, lines)
		}
	}
	t.Logf("%d lines over %d commands: %d ok, %d help, %d usage errors; kong agreed on every one", lines, len(leaves), counts["ok"], counts["help"], counts["error"])
}

// Arbitrary argv (words separated by NUL in the fuzz input): both parsers
// must reach the same outcome.
func FuzzParseMatchesKong(f *testing.F) {
	for _, s := range []string{
		"job\x00submit\x00--target\x00cli\x00--thread-id=t\x00--task-kind\x00k\x00--summary\x00s\x00--json",
		"job\x00complete\x00--job-id\x00j\x00--summary\x00done\x00--result-file\x00~/r.txt",
		"events\x00tail\x00-fn5",
		"wait\x00--job-id\x00a,b\x00--timeout=1s",
		"model\x00add\x00p/m\x00--driver\x00d\x00--id\x00i\x00--session\x00socket",
		"artifact\x00pin\x00--artifact-id\x00a\x00--until\x002026-01-02T03:04:05Z",
		"--json\x00job\x00query\x00--\x00-j",
		"completion\x00zsh\x00-h",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		sameHome(t)
		compare(t, strings.Split(line, "\x00"))
	})
}

// Every tag on the real tree is one the parser reads, and no flag or
// command name is declared twice where kong would have refused the tree.
func TestCommandTreeChecks(t *testing.T) {
	if err := app.Check(&CLI{}); err != nil {
		t.Fatal(err)
	}
	// run calls Run(*Env) or Run(*cortexcli.Env); kong would have bound
	// other parameters, so a leaf with another signature must fail here.
	root, err := app.Tree(&CLI{})
	if err != nil {
		t.Fatal(err)
	}
	var walk func(n *cmdline.Node)
	walk = func(n *cmdline.Node) {
		cs, _ := n.Children()
		if len(cs) == 0 {
			switch n.Target().(type) {
			case interface{ Run(*Env) error }, interface{ Run(*cortexcli.Env) error }:
			default:
				t.Errorf("%s: no Run(*Env) error or Run(*cortexcli.Env) error", n.FullPath())
			}
		}
		for _, c := range cs {
			walk(c)
		}
	}
	walk(root)
}

// The reason for internal/cmdline: the binary must not link kong, nor the
// packages it brought (os/user is cgo; go/doc is heavy to initialize).
// Nor net/url and net/netip: netip's init starts a goroutine of package
// unique, and an empty program importing net/url started 0.15 ms slower.
func TestBinaryDoesNotLinkKong(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/alecthomas/kong") || pkg == "os/user" || pkg == "go/doc" ||
			pkg == "net/url" || pkg == "net/netip" {
			t.Errorf("cmd/cbth links %s", pkg)
		}
	}
}

// A plain `go build` must give a static binary even where a C compiler is
// installed (cgo on): a dynamically linked cbth pays the dynamic loader at
// every start, and the echo object measured 3.7 ms that way against 2.3 ms
// static. The binary stays static as long as no package it links has cgo
// files under CGO_ENABLED=1 (package net and os/user did: both are gone).
func TestNoPackageInTheBinaryUsesCgo(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if .CgoFiles}}{{.ImportPath}}{{end}}", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if cgo := strings.Fields(string(out)); len(cgo) > 0 {
		t.Errorf("with cgo on, these packages of cmd/cbth use it, so a default build is dynamically linked: %v", cgo)
	}
}
