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
	"unicode/utf8"

	"github.com/alecthomas/kong"
	cortexcli "github.com/cbth-dev/cbth/adapters/cortexfs/cli"
	"github.com/cbth-dev/cbth/engine/errs"
	"github.com/willabides/kongplete"
)

// Version is the cbth release. The socket handshake reports it; a client
// replaces an older idle daemon. A variable so a build can stamp it
// (-ldflags "-X main.Version=...").
var Version = "0.2.0"

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
	Task       TaskCmd       `cmd:"" help:"Have the daemon run a command for a job: its exit completes or fails the job."`
	Batch      BatchCmd      `cmd:"" help:"Inspect and repair delivery batches (operator recovery)."`
	Thread     ThreadCmd     `cmd:"" help:"A conversation thread's history of batches."`
	Wait       WaitCmd       `cmd:"" help:"Block until jobs' deliveries are closed."`
	Watch      WatchCmd      `cmd:"" help:"A live view of the daemon: open heads, deliveries in flight, parked batches, tasks, keep-alive reasons; never starts a daemon."`
	Events     EventsCmd     `cmd:"" help:"Audit the log: export, verify, diff, replay, tail."`
	HomeCmd    HomeCmd       `cmd:"" name:"home" help:"Start a new home when the log cannot be trusted."`
	Artifact   ArtifactCmd   `cmd:"" help:"Keep an artifact longer than its retention (operator pin)."`
	Debug      DebugCmd      `cmd:"" help:"Drive the built-in debug target and clock (testing and demos)."`
	Cli        CliCmd        `cmd:"" help:"Run Codex CLI under cbth (managed sessions on the daemon's shared app-server)."`
	Desktop    DesktopCmd    `cmd:"" help:"Codex Desktop: installation state, thread bindings and the bridge's helpers."`
	Mcp        McpCmd        `cmd:"" name:"mcp" help:"cbth as an MCP server for the agent inside Codex: serve, install into Codex's config, uninstall."`
	Plugin     PluginCmd     `cmd:"" help:"Host plugins: the codex_app_server delivery target (handshake, ensure, enqueue, inspect)."`
	Service    ServiceCmd    `cmd:"" help:"Keep the daemon running as a per-user service (systemd user unit, launchd agent)."`
	Gateway    GatewayCmd    `cmd:"" help:"The channel gateway: send dialog / ssh_remote envelopes, tail what it routes, manage its routes."`
	Doctor     DoctorCmd     `cmd:"" help:"Check the home, daemon, log, CortexFS runner, provider helper and credentials; say how to fix each problem."`

	Ctx     cortexcli.CtxCmd     `cmd:"" help:"The CortexFS object tree ($CTX_ROOT, default $CBTH_HOME/ctx)."`
	Model   cortexcli.ModelCmd   `cmd:"" help:"Register, list, alias and remove CortexFS model objects."`
	Agent   cortexcli.AgentCmd   `cmd:"" help:"Register, list and remove CortexFS agent objects (a model + tool loop in a root; shell.exec is confined to it where the OS can, see cbth doctor)."`
	Install cortexcli.InstallCmd `cmd:"" help:"Install cbth with its ctx and cortexfs-object-runner names (and cbth-providers)."`
}

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// exitCode carries kong's exit (after --help, or a completion answered)
// out of Parse, so run returns it instead of the process exiting.
type exitCode int

// catchExit, deferred, turns a kong exit into the caller's result.
func catchExit(code *int) {
	if r := recover(); r != nil {
		c, ok := r.(exitCode)
		if !ok {
			panic(r)
		}
		*code = int(c)
	}
}

func run(argv []string, stdout, stderr io.Writer) (code int) {
	if code, ok := multicall(argv[0], argv[1:]); ok {
		return code
	}
	env := &Env{Stdout: stdout, Stderr: stderr, Getenv: os.Getenv}
	if err := checkArgs(argv[1:]); err != nil {
		env.JSON = jsonRequested(argv[1:])
		return env.fail(err)
	}
	return runKong(argv, env)
}

// runKong parses the command line with kong and runs the command.
func runKong(argv []string, env *Env) (code int) {
	stdout, stderr := env.Stdout, env.Stderr
	var cli CLI
	parser, err := kong.New(&cli,
		kong.Name("cbth"),
		kong.Description("cbth runs long jobs for AI coding agents and delivers each result back into the conversation thread that asked for it."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(exitCode(code)) }),
		kong.Bind(env),
		// Only the CortexFS commands pay for deriving their environment,
		// and only once --home and --json are known.
		kong.BindToProvider(func() (*cortexcli.Env, error) {
			c := cortexEnv(env)
			return &c, nil
		}),
	)
	if err != nil { // the command structs themselves are wrong
		fmt.Fprintln(stderr, "cbth:", err)
		return errs.ExitInternal
	}
	defer catchExit(&code)
	// A shell asking for completions (COMP_LINE set, see `cbth
	// completion`) is answered from the command tree, and run exits here.
	// Only then: kongplete builds its own model of the whole tree first.
	if env.Getenv("COMP_LINE") != "" {
		kongplete.Complete(parser)
	}
	kctx, err := parser.Parse(argv[1:])
	if err != nil {
		env.JSON = jsonRequested(argv[1:])
		code := env.fail(errs.Wrap(errs.EINVAL, err, "usage"))
		var pe *kong.ParseError
		if errors.As(err, &pe) && pe.Context != nil {
			pe.Context.Stdout = stderr
			_ = pe.Context.PrintUsage(true)
		}
		return code
	}
	env.JSON, env.HomeFlag = cli.JSON, cli.Home
	if err := kctx.Run(); err != nil {
		var st exitStatus
		if errors.As(err, &st) {
			return int(st) // a child's status, already reported
		}
		return env.fail(err)
	}
	return 0
}

// checkArgs refuses a command line with a word that is not valid UTF-8.
// The parser would turn each stray byte into U+FFFD, as kong does, so
// two different thread ids could become one; cbth takes text as given or
// not at all.
func checkArgs(args []string) error {
	for i, a := range args {
		if !utf8.ValidString(a) {
			return errs.New(errs.EINVAL, "argument %d (%q) is not valid UTF-8; cbth takes text as given or not at all", i+1, a)
		}
	}
	return nil
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

// reported is a failure whose result the command has already printed as
// its one JSON document (a verify report with problems, a diff that
// differs): stdout gets no second document for it.
type reported struct{ error }

func (r reported) Unwrap() error { return r.error }

// fail reports err: a JSON error object on stdout under --json, always a
// line on stderr, and the exit code of its stable code.
func (e *Env) fail(err error) int {
	code := errs.CodeOf(err)
	var ee *errs.Error
	msg := err.Error()
	if errors.As(err, &ee) {
		msg = ee.Error()
	}
	if e.JSON && !errors.As(err, new(reported)) {
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": string(code), "message": msg}})
		fmt.Fprintln(e.Stdout, string(b))
	}
	fmt.Fprintf(e.Stderr, "cbth: %s (%s)\n", msg, code)
	return code.ExitCode()
}
