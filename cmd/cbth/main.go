// Command cbth is the durable local background for AI coding agents: it
// runs the daemon, takes job reports from scripts and lets operators
// inspect and repair delivery. The same binary answers as ctx and as
// cortexfs-object-runner when invoked under those names.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/alecthomas/kong"
	cortexcli "github.com/cbth-dev/cbth/adapters/cortexfs/cli"
	"github.com/cbth-dev/cbth/engine/errs"
)

// Version is the cbth release. The socket handshake compares it.
const Version = "0.1.0"

// Globals are the flags every command takes.
type Globals struct {
	JSON bool   `help:"Print machine-readable JSON on stdout (stable shapes, see spec/cli.md)." name:"json"`
	Home string `help:"cbth home directory (default: $CBTH_HOME, else ~/.cbth)." placeholder:"DIR"`
}

// CLI is the command tree.
type CLI struct {
	Globals

	Version    VersionCmd    `cmd:"" help:"Print the cbth version."`
	Completion CompletionCmd `cmd:"" help:"Print a shell completion script (bash, zsh or fish)."`
	Demo       DemoCmd       `cmd:"" help:"Run the main job end to end in a private temporary home and show what happened."`
	Daemon     DaemonCmd     `cmd:"" help:"Run, inspect or stop the daemon."`
	Job        JobCmd        `cmd:"" help:"Submit jobs and report their outcome (the script protocol)."`
	Batch      BatchCmd      `cmd:"" help:"Inspect and repair delivery batches (operator recovery)."`
	Wait       WaitCmd       `cmd:"" help:"Block until jobs' deliveries are closed."`
	Events     EventsCmd     `cmd:"" help:"Audit the log: export, verify, diff, replay, tail."`
	Artifact   ArtifactCmd   `cmd:"" help:"Keep an artifact longer than its retention (operator pin)."`
	Debug      DebugCmd      `cmd:"" help:"Drive the built-in debug target and clock (testing and demos)."`

	Ctx     cortexcli.CtxCmd     `cmd:"" help:"The CortexFS object tree ($CTX_ROOT, default $CBTH_HOME/ctx)."`
	Model   cortexcli.ModelCmd   `cmd:"" help:"Register, list, alias and remove CortexFS model objects."`
	Install cortexcli.InstallCmd `cmd:"" help:"Install cbth with its ctx and cortexfs-object-runner names (and cbth-providers)."`
}

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

func run(argv []string, stdout, stderr io.Writer) int {
	if code, ok := multicall(argv[0], argv[1:]); ok {
		return code
	}
	env := &Env{Stdout: stdout, Stderr: stderr, Getenv: os.Getenv}
	if cmd, g, ok := fastParse(argv[1:]); ok {
		env.JSON, env.HomeFlag = g.JSON, g.Home
		if err := cmd.Run(env); err != nil {
			return env.fail(err)
		}
		return 0
	}
	cenv := &cortexcli.Env{} // filled in after parsing, once --home is known
	// Scripts call `cbth job ...` for every report; kong builds its model
	// by reflection over the whole tree on each start, so those calls get
	// a tree of just the job commands (same types, same flags). Help and
	// anything else get the full tree.
	var cli any = &CLI{}
	var globals *Globals = &cli.(*CLI).Globals
	jobOnly := false
	if t, g := jobTree(argv[1:]); t != nil {
		cli, globals, jobOnly = t, g, true
	}
	parser, err := kong.New(cli,
		kong.Name("cbth"),
		kong.Description("cbth runs long jobs for AI coding agents and delivers each result back into the conversation thread that asked for it."),
		kong.UsageOnError(),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(exitCode(code)) }),
		kong.Bind(env, cenv),
	)
	if err != nil {
		fmt.Fprintln(stderr, "cbth:", err)
		return errs.ExitInternal
	}
	return func() (code int) {
		defer func() {
			if r := recover(); r != nil {
				if c, ok := r.(exitCode); ok {
					code = int(c)
					return
				}
				panic(r)
			}
		}()
		kctx, err := parser.Parse(argv[1:])
		if err != nil {
			env.JSON = jsonRequested(argv[1:])
			return env.fail(errs.Wrap(errs.EINVAL, err, "usage"))
		}
		env.JSON = globals.JSON
		env.HomeFlag = globals.Home
		if !jobOnly { // the job verbs never need the CortexFS environment
			*cenv = cortexEnv(env)
		}
		if err := kctx.Run(env); err != nil {
			return env.fail(err)
		}
		return 0
	}()
}

type exitCode int

// jobTree returns, for a `cbth job <verb> ...` line, a command tree that
// holds only that verb (same types, same flags), and nil otherwise. kong
// builds its model by reflection over every node and tag on each start;
// scripts call these verbs for every report, so they get the smallest tree.
// Help and anything unusual get the full tree.
func jobTree(args []string) (any, *Globals) {
	if len(args) < 2 || args[0] != "job" {
		return nil, nil
	}
	for _, a := range args {
		if a == "--help" || a == "-h" {
			return nil, nil
		}
	}
	switch args[1] {
	case "submit":
		t := &verbTree[struct {
			Submit JobSubmitCmd `cmd:""`
		}]{}
		return t, &t.Globals
	case "complete":
		t := &verbTree[struct {
			Complete JobCompleteCmd `cmd:""`
		}]{}
		return t, &t.Globals
	case "fail":
		t := &verbTree[struct {
			Fail JobFailCmd `cmd:""`
		}]{}
		return t, &t.Globals
	case "cancel":
		t := &verbTree[struct {
			Cancel JobCancelCmd `cmd:""`
		}]{}
		return t, &t.Globals
	case "query":
		t := &verbTree[struct {
			Query JobQueryCmd `cmd:""`
		}]{}
		return t, &t.Globals
	}
	return nil, nil
}

type verbTree[T any] struct {
	Globals
	Job T `cmd:""`
}

// jsonRequested spots --json on a command line that failed to parse, so
// the usage error is still reported as JSON.
func jsonRequested(args []string) bool {
	for _, a := range args {
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}

// fail reports err: a JSON error object on stdout under --json, always a
// line on stderr, and the exit code of its stable code.
func (e *Env) fail(err error) int {
	code := errs.CodeOf(err)
	var ee *errs.Error
	msg := err.Error()
	if errors.As(err, &ee) {
		msg = ee.Error()
	}
	if e.JSON {
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": string(code), "message": msg}})
		fmt.Fprintln(e.Stdout, string(b))
	}
	fmt.Fprintf(e.Stderr, "cbth: %s (%s)\n", msg, code)
	return code.ExitCode()
}
