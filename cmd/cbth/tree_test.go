package main

import (
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
