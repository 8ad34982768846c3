package main

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	cortexcli "github.com/cbth-dev/cbth/adapters/cortexfs/cli"
)

// Every leaf command has a Run that run can call with what it binds (an
// *Env, or the CortexFS commands' *cortexcli.Env): a leaf with another
// signature would only fail when someone runs it.
func TestEveryLeafRuns(t *testing.T) {
	t.Parallel()
	p, err := kong.New(&CLI{}, cliVars())
	if err != nil {
		t.Fatal(err)
	}
	leaves := 0
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		if len(n.Children) == 0 {
			leaves++
			switch n.Target.Addr().Interface().(type) {
			case interface{ Run(*Env) error }, interface{ Run(*cortexcli.Env) error }:
			default:
				t.Errorf("%s: no Run(*Env) error or Run(*cortexcli.Env) error", n.FullPath())
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(p.Model.Node)
	if leaves < 30 {
		t.Fatalf("only %d leaf commands: the walk missed the tree", leaves)
	}
}

// The model a command line gets (oneCommand, narrowed) is the whole
// tree's, cut down: for every command path, `cbth PATH --help` prints
// what the whole tree prints for it, and the words of a leaf's path
// select a model that holds that leaf alone under each group.
func TestNarrowedModelMatchesTheTree(t *testing.T) {
	t.Parallel()
	whole := func(args []string) string {
		var out bytes.Buffer
		env := &Env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}
		p, err := kong.New(&CLI{}, kongOptions(env, cliVars())...)
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer catchExit(new(int))
			_, _ = p.Parse(args)
		}()
		return out.String()
	}
	p, err := kong.New(&CLI{}, cliVars())
	if err != nil {
		t.Fatal(err)
	}
	paths, nestedLeaves, narrowedLeaves := 0, 0, 0
	var walk func(n *kong.Node, path []string)
	walk = func(n *kong.Node, path []string) {
		if len(path) > 0 {
			paths++
			args := append(slices.Clone(path), "--help")
			var out bytes.Buffer
			if code := run(append([]string{"cbth"}, args...), &out, &out); code != 0 {
				t.Errorf("cbth %s: exit %d\n%s", strings.Join(args, " "), code, out.String())
			}
			if want := whole(args); out.String() != want {
				t.Errorf("cbth %s: the narrowed model's help differs from the tree's\n got: %s\nwant: %s", strings.Join(args, " "), out.String(), want)
			}
			if len(n.Children) == 0 && len(path) > 1 {
				nestedLeaves++
				var cli CLI
				opt, _, ok := oneCommand(&cli, path, false)
				if !ok {
					t.Fatalf("%s: no model for the path", strings.Join(path, " "))
				}
				np, err := kong.New(&struct{ Globals }{}, cliVars(), opt)
				if err != nil {
					t.Fatalf("%s: %v", strings.Join(path, " "), err)
				}
				if one := onlyChildren(np.Model.Node); one {
					narrowedLeaves++
				}
			}
		}
		for _, c := range n.Children {
			walk(c, append(slices.Clone(path), c.Name))
		}
	}
	walk(p.Model.Node, nil)
	if paths < 40 {
		t.Fatalf("only %d command paths: the walk missed the tree", paths)
	}
	// Every nested leaf gets a model of its own path: a group kept whole
	// (one with kong hooks or an embedded field, see narrowed) or a
	// command word commandField does not know (a field named by kong's
	// own rule rather than a name tag) shows up here.
	if narrowedLeaves != nestedLeaves {
		t.Fatalf("%d of %d nested leaf commands got a narrowed model", narrowedLeaves, nestedLeaves)
	}
}

// onlyChildren reports whether every node under n has at most one child.
func onlyChildren(n *kong.Node) bool {
	if len(n.Children) > 1 {
		return false
	}
	for _, c := range n.Children {
		if !onlyChildren(c) {
			return false
		}
	}
	return true
}

// BenchmarkKongModel is what kong costs a `cbth job submit` line before
// the command runs: the model oneCommand gives it, built and parsed.
func BenchmarkKongModel(b *testing.B) {
	env := &Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	args := []string{"job", "submit", "--target", "cli", "--thread-id", "t", "--task-kind", "k", "--summary", "s", "--json"}
	for b.Loop() {
		var cli CLI
		var root struct{ Globals }
		opt, t, _ := oneCommand(&cli, args, false)
		p, err := kong.New(&root, append(kongOptions(env, usedVars(cliVars(), t)), opt)...)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Parse(args); err != nil {
			b.Fatal(err)
		}
	}
}
