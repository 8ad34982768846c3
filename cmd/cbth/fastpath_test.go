package main

import (
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// kongParse parses a job verb line with kong over the same tree the CLI
// uses, returning the verb's struct and the globals.
func kongParse(t *testing.T, args []string) (cmd any, g Globals, ok bool) {
	t.Helper()
	tree, globals := jobTree(args)
	if tree == nil {
		return nil, g, false
	}
	parser, err := kong.New(tree, kong.Name("cbth"), kong.Writers(io.Discard, io.Discard),
		kong.Exit(func(int) { panic(exitCode(0)) }))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			if _, isExit := r.(exitCode); !isExit {
				panic(r)
			}
			cmd, ok = nil, false
		}
	}()
	if _, err := parser.Parse(args); err != nil {
		return nil, g, false
	}
	verb := reflect.ValueOf(tree).Elem().FieldByName("Job").Field(0)
	return verb.Addr().Interface(), *globals, true
}

func TestFastPathMatchesKong(t *testing.T) {
	verbs := map[string]reflect.Type{
		"submit":   reflect.TypeFor[JobSubmitCmd](),
		"complete": reflect.TypeFor[JobCompleteCmd](),
		"fail":     reflect.TypeFor[JobFailCmd](),
		"cancel":   reflect.TypeFor[JobCancelCmd](),
	}
	// The fast parser must name every flag as kong does.
	for verb, typ := range verbs {
		_, _, ok := kongParse(t, []string{"job", verb, "--help"})
		if ok {
			t.Fatalf("%s --help parsed as a command", verb)
		}
		for i := range typ.NumField() {
			sf := typ.Field(i)
			if !onlyFastTags(sf.Tag) {
				t.Errorf("%s.%s has a tag the fast parser does not know; it would fall back to kong for every line", typ.Name(), sf.Name)
			}
		}
	}

	values := []string{"x", "", "a b", "=", "a=b", "-x", "--json", "~/r.txt", "rel/p.txt", "/abs/p", "ünï", "true", "false", "maybe", "cli"}
	extra := []string{"--json", "--json=true", "--json=false", "--home", "--help", "-h", "--bogus", "--", "pos"}
	rng := rand.New(rand.NewPCG(7, 7))
	accepted, agreed := 0, 0
	const lines = 4000
	for n := range lines {
		verb := []string{"submit", "complete", "fail", "cancel"}[n%4]
		typ := verbs[verb]
		var groups [][]string // one flag with its value each
		for i := range typ.NumField() {
			if rng.IntN(8) == 0 { // sometimes leave a flag out
				continue
			}
			name := flagName(typ.Field(i))
			v := values[rng.IntN(len(values))]
			if rng.IntN(2) == 0 {
				groups = append(groups, []string{"--" + name + "=" + v})
			} else {
				groups = append(groups, []string{"--" + name, v})
			}
			if rng.IntN(20) == 0 { // sometimes twice
				groups = append(groups, []string{"--" + name, "again"})
			}
		}
		if rng.IntN(2) == 0 {
			e := []string{extra[rng.IntN(len(extra))]}
			if e[0] == "--home" {
				e = append(e, values[rng.IntN(len(values))])
			}
			groups = append(groups, e)
		}
		rng.Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
		args := []string{"job", verb}
		for _, g := range groups {
			args = append(args, g...)
		}

		fast, fg, fok := fastParse(args)
		if !fok {
			continue
		}
		accepted++
		kcmd, kg, kok := kongParse(t, args)
		if !kok {
			t.Errorf("%q: the fast parser accepted a line kong rejects", args)
			continue
		}
		if !reflect.DeepEqual(fast, kcmd) || fg != kg {
			t.Errorf("%q:\nfast %+v %+v\nkong %+v %+v", args, fast, fg, kcmd, kg)
			continue
		}
		agreed++
	}
	// Odd values and extras send many lines to kong; the rest must still
	// exercise the fast parser, or this test proves nothing.
	if accepted < lines/10 {
		t.Fatalf("the fast parser took only %d of %d lines", accepted, lines)
	}
	t.Logf("fast parser took %d of %d lines; kong agreed on %d", accepted, lines, agreed)
}

// The lines scripts really run go through the fast path.
func TestFastPathTakesScriptLines(t *testing.T) {
	for _, line := range [][]string{
		{"job", "submit", "--target", "cli", "--thread-id", "t1", "--task-kind", "ci", "--summary", "wait for CI", "--json"},
		{"job", "submit", "--target=desktop", "--thread-id=t", "--task-kind=k", "--summary=s", "--dedupe-key=d", "--delivery-read-only=true"},
		{"job", "complete", "--job-id", "j", "--summary", "done", "--result-file", "out.txt", "--json"},
		{"job", "fail", "--job-id", "j", "--reason", "boom"},
		{"job", "cancel", "--job-id", "j", "--json", "--home", "/tmp/h"},
	} {
		fast, fg, ok := fastParse(line)
		if !ok {
			t.Errorf("%q fell back to kong", line)
			continue
		}
		kcmd, kg, kok := kongParse(t, line)
		if !kok || !reflect.DeepEqual(fast, kcmd) || fg != kg {
			t.Errorf("%q: fast %+v %+v, kong (ok=%v) %+v %+v", line, fast, fg, kok, kcmd, kg)
		}
	}
	for _, line := range [][]string{
		{"job", "submit", "--help"},
		{"job", "list"},
		{"job", "query", "j"},
		{"--json", "job", "fail", "--job-id", "j", "--reason", "r"},
		{"job", "fail", "--job-id", "j"}, // missing --reason: kong words the error
	} {
		if _, _, ok := fastParse(line); ok {
			t.Errorf("%q took the fast path", line)
		}
	}
}

// Whatever line the fast parser takes, kong takes too, with the same
// result. Arguments are separated by NUL in the fuzz input.
func FuzzFastPath(f *testing.F) {
	f.Add("submit\x00--target\x00cli\x00--thread-id=t\x00--task-kind\x00k\x00--summary\x00s\x00--json")
	f.Add("complete\x00--job-id\x00j\x00--summary\x00done\x00--result-file\x00~/r.txt")
	f.Add("fail\x00--job-id=j\x00--reason=a=b")
	f.Add("cancel\x00--job-id\x00j\x00--home\x00/h\x00--reason\x00")
	f.Fuzz(func(t *testing.T, line string) {
		args := append([]string{"job"}, strings.Split(line, "\x00")...)
		fast, fg, ok := fastParse(args)
		if !ok {
			return
		}
		kcmd, kg, kok := kongParse(t, args)
		if !kok {
			t.Fatalf("%q: the fast parser accepted a line kong rejects", args)
		}
		if !reflect.DeepEqual(fast, kcmd) || fg != kg {
			t.Fatalf("%q:\nfast %+v %+v\nkong %+v %+v", args, fast, fg, kcmd, kg)
		}
	})
}
