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
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/alecthomas/kong"
	cortexcli "github.com/cbth-dev/cbth/adapters/cortexfs/cli"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/posener/complete"
	"github.com/willabides/kongplete"
)

// Version is the cbth release. The socket handshake reports it; a client
// replaces an older idle daemon. A variable so a build can stamp it
// (-ldflags "-X main.Version=...").
var Version = "0.2.0"

// Globals are the flags every command takes.
type Globals struct {
	JSON        bool             `help:"Print machine-readable JSON on stdout (stable shapes, see spec/cli.md)." name:"json"`
	Home        string           `help:"cbth home directory (default: $CBTH_HOME, else ~/.cbth)." placeholder:"DIR"`
	VersionFlag kong.VersionFlag `name:"version" help:"Print the version and the protocol, and exit."`
}

// CLI is the command tree. Each top-level command sits in a group of
// what a person does with it; the help lists the groups and their
// commands, each command's detail one level down (cbth COMMAND --help).
type CLI struct {
	Globals

	Install cortexcli.InstallCmd `cmd:"" group:"start" help:"Install cbth with its ctx and runner names."`
	Demo    DemoCmd              `cmd:"" group:"start" help:"Run the main job end to end in a private temporary home."`
	Doctor  DoctorCmd            `cmd:"" group:"start" help:"Check the home, daemon, log and wiring; say how to fix each problem."`

	Job    JobCmd    `cmd:"" group:"jobs" help:"Submit jobs and report their outcome (the script protocol)."`
	Task   TaskCmd   `cmd:"" group:"jobs" help:"Have the daemon run a command for a job; its exit reports the job."`
	Wait   WaitCmd   `cmd:"" group:"jobs" help:"Block until jobs' deliveries are closed."`
	Cli    CliCmd    `cmd:"" group:"codex" help:"Run the Codex TUI under cbth, so results continue its thread."`
	Mcp    McpCmd    `cmd:"" name:"mcp" group:"codex" help:"The agent's tools inside Codex: install, uninstall, serve."`
	Plugin PluginCmd `cmd:"" group:"codex" help:"Deliver into a host plugin's own Codex threads."`

	Desktop DesktopCmd `cmd:"" group:"desktop" help:"Installation state, bindings, the heartbeats' helpers."`
	Service ServiceCmd `cmd:"" group:"desktop" help:"Keep the daemon running as a per-user service."`

	Ctx     cortexcli.CtxCmd   `cmd:"" group:"cortexfs" help:"The CortexFS object tree ($CTX_ROOT, default $CBTH_HOME/ctx)."`
	Model   cortexcli.ModelCmd `cmd:"" group:"cortexfs" help:"Register, list, alias and remove CortexFS model objects."`
	Agent   cortexcli.AgentCmd `cmd:"" group:"cortexfs" help:"Register, list and remove CortexFS agents (a model + tool loop)."`
	Gateway GatewayCmd         `cmd:"" group:"cortexfs" help:"The channel gateway: envelopes, routes, what it routed."`

	Batch    BatchCmd    `cmd:"" group:"operators" help:"Inspect and repair delivery batches (operator recovery)."`
	Thread   ThreadCmd   `cmd:"" group:"operators" help:"A conversation thread: its batches over time, and the trust its deliveries get."`
	Watch    WatchCmd    `cmd:"" group:"operators" help:"A live view of heads, deliveries, parked batches and tasks."`
	Artifact ArtifactCmd `cmd:"" group:"operators" help:"Keep an artifact longer than its retention (operator pin)."`
	Debug    DebugCmd    `cmd:"" group:"operators" help:"Drive the built-in debug target and clock (testing and demos)."`

	Events  EventsCmd `cmd:"" group:"auditors" help:"Audit the log: export, verify, diff, replay, tail."`
	HomeCmd HomeCmd   `cmd:"" name:"home" group:"auditors" help:"Start a new home when the log cannot be trusted."`

	Daemon     DaemonCmd     `cmd:"" group:"daemon" help:"Run, inspect, restart or stop the daemon."`
	Version    VersionCmd    `cmd:"" group:"daemon" help:"Print the cbth version."`
	Completion CompletionCmd `cmd:"" group:"daemon" help:"Print a shell completion script (bash, zsh or fish)."`
}

// groups are the help's sections, in order.
var groups = []kong.Group{
	{Key: "start", Title: "Getting started:"},
	{Key: "jobs", Title: "Jobs and tasks (scripts, CI hooks, task runners):"},
	{Key: "codex", Title: "Codex (the CLI under cbth, the agent's MCP tools, host plugins):"},
	{Key: "desktop", Title: "Codex Desktop:"},
	{Key: "cortexfs", Title: "CortexFS and channels:"},
	{Key: "operators", Title: "Operators:"},
	{Key: "auditors", Title: "Auditors:"},
	{Key: "daemon", Title: "The daemon and this binary:"},
}

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// exitCode carries kong's exit (after --help, or a completion answered)
// out of Parse, so run returns it instead of the process exiting.
type exitCode int

// cliVars are the variables the command tree's tags name: the version,
// and the targets, whose help, placeholder and completion come from the
// one list (command.Targets).
func cliVars() kong.Vars {
	return kong.Vars{"version": fmt.Sprintf("cbth %s (protocol %d)", Version, ipc.Proto),
		"target_placeholder": strings.Join(command.FlagTargets(), "|"), "target_list": strings.Join(command.FlagTargets(), ", "),
		"thread_route_list": strings.Join(command.ThreadRouteTargets(), ", "), "thread_route_placeholder": strings.Join(command.ThreadRouteTargets(), "|")}
}

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
//
// kong builds its model of every command reachable from the struct it is
// given, by reflection, at every start: for the one command a run uses,
// that is most of cbth's start-up. So when the command line names a
// command, the model holds the global flags and that command's path
// alone (oneCommand, narrowed); the whole tree is built only for the
// help, completion, and a line that names no command (which kong then
// explains).
func runKong(argv []string, env *Env) (code int) {
	stderr := env.Stderr
	var cli CLI
	var root struct{ Globals }
	globals := &cli.Globals
	model, opts := any(&cli), []kong.Option(nil)
	if cmd, t, ok := oneCommand(&cli, argv[1:], env.Getenv("COMP_LINE") != ""); ok {
		model, globals = &root, &root.Globals
		opts = append(kongOptions(env, usedVars(cliVars(), t)), cmd)
	} else {
		opts = kongOptions(env, cliVars())
	}
	parser, err := kong.New(model, opts...)
	if err != nil { // the command structs themselves are wrong
		fmt.Fprintln(stderr, "cbth:", err)
		return errs.ExitInternal
	}
	defer catchExit(&code)
	// A shell asking for completions (COMP_LINE set, see `cbth
	// completion`) is answered from the command tree, and run exits here.
	// Only then: kongplete builds its own model of the whole tree first.
	if env.Getenv("COMP_LINE") != "" {
		kongplete.Complete(parser, kongplete.WithPredictor("target", complete.PredictSet(command.FlagTargets()...)))
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
	env.JSON, env.HomeFlag = globals.JSON, globals.Home
	if err := kctx.Run(); err != nil {
		var st exitStatus
		if errors.As(err, &st) {
			return int(st) // a child's status, already reported
		}
		return env.fail(err)
	}
	return 0
}

// oneCommand finds the top-level command args name, skipping the global
// flags before it, and returns it as the only command of a smaller model
// (see narrowed). It declines for a completion request, a help request
// before any command, and a line whose first word is no command.
func oneCommand(cli *CLI, args []string, completing bool) (kong.Option, reflect.Type, bool) {
	if completing {
		return nil, nil, false
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--home":
			i++
			continue
		case a == "-h" || a == "--help" || a == "--version":
			return nil, nil, false
		case strings.HasPrefix(a, "-"):
			continue
		}
		f, ok := commandField(reflect.TypeOf(cli).Elem(), a)
		if !ok {
			return nil, nil, false
		}
		t := narrowed(f.Type, args[i+1:])
		return kong.DynamicCommand(a, f.Tag.Get("help"), f.Tag.Get("group"), reflect.New(t).Interface()), t, true
	}
	return nil, nil, false
}

// usedVars keeps of vars the version (--version prints it) and those a
// tag of t, or of a struct t holds, names. kong interpolates every
// variable's value again for every flag of the model, so a variable no
// tag of the command uses is work for nothing at each start.
func usedVars(vars kong.Vars, t reflect.Type) kong.Vars {
	out := kong.Vars{"version": vars["version"]}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			for name, v := range vars {
				if strings.Contains(string(f.Tag), "${"+name) {
					out[name] = v
				}
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(Globals{}))
	walk(t)
	return out
}

// commandField is the command field of the struct t that word names.
func commandField(t reflect.Type, word string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if _, isCmd := f.Tag.Lookup("cmd"); !isCmd {
			continue
		}
		name := f.Tag.Get("name")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == word {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// narrowed is the command group t cut down to the subcommand path the
// words name: each group on the path keeps its own flags and the one
// subcommand taken, so kong reflects over a handful of structs instead
// of the group's every command. The leaf keeps its own type, with its
// Run and Validate; it starts zero, as the field of the whole tree does.
// A group is kept whole where the path stops (a flag or an unknown word
// comes first, so kong's error lists the choices) and where cutting it
// could change what kong sees: a group with methods (kong hooks), or
// with an embedded or unexported field.
func narrowed(t reflect.Type, words []string) reflect.Type {
	if len(words) == 0 || strings.HasPrefix(words[0], "-") || t.Kind() != reflect.Struct || reflect.PointerTo(t).NumMethod() != 0 {
		return t
	}
	sub, ok := commandField(t, words[0])
	if !ok {
		return t
	}
	var fields []reflect.StructField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous || !f.IsExported() {
			return t
		}
		if _, isCmd := f.Tag.Lookup("cmd"); isCmd {
			if f.Name != sub.Name {
				continue
			}
			f.Type = narrowed(f.Type, words[1:])
		}
		f.Index, f.Offset = nil, 0
		fields = append(fields, f)
	}
	return reflect.StructOf(fields)
}

// kongOptions are the parser's options for a run with env and the
// variables its tags may name: the same for the whole tree and for the
// one command a line names.
func kongOptions(env *Env, vars kong.Vars) []kong.Option {
	return []kong.Option{
		kong.Name("cbth"),
		kong.Description("cbth runs long jobs for AI coding agents and delivers each result back into the conversation thread that asked for it."),
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(code int) { panic(exitCode(code)) }),
		vars,
		kong.ExplicitGroups(groups),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true, NoExpandSubcommands: true}),
		kong.Bind(env),
		// Only the CortexFS commands pay for deriving their environment,
		// and only once --home and --json are known.
		kong.BindToProvider(func() (*cortexcli.Env, error) {
			c := cortexEnv(env)
			return &c, nil
		}),
	}
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
