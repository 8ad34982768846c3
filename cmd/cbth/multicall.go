package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kong"
	cortexcli "github.com/cbth-dev/cbth/adapters/cortexfs/cli"
	"github.com/cbth-dev/cbth/adapters/cortexfs/runner"
	"github.com/cbth-dev/cbth/adapters/cortexfs/socket"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tool"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/internal/confine"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// multicall lets the one cbth binary answer under its other names. main
// calls it first; handled=false means "not one of those names, or not a
// form handled here: carry on with the normal CLI".
func multicall(argv0 string, args []string) (exit int, handled bool) {
	switch filepath.Base(argv0) {
	case confine.ProgramName:
		// shell.exec and the provider helper start here: confine, then
		// execute the program (it returns only on failure).
		return confine.Main(args), true
	case runner.ProgramName:
		// The kernel runs objects as `cortexfs-object-runner <object> args...`
		// through their #! line. The runner installs its SIGINT/SIGTERM
		// handling itself, only around calls that can block.
		renv := runner.ProcessEnv(context.Background())
		renv.Jobs = daemonJobs{env: &Env{Stdout: io.Discard, Stderr: os.Stderr, Getenv: os.Getenv}}
		renv.Interactive = func(sock string) int { return chatOn(sock, socket.DefaultSession) }
		return runner.Main(args, os.Stdin, os.Stdout, os.Stderr, renv), true
	case cortexcli.ProgramName:
		// `ctx model/<provider>/<model> [session]` is the socket REPL. Every
		// other ctx form belongs to the normal command tree.
		if len(args) >= 1 && strings.HasPrefix(args[0], "model/") {
			return ctxChat(args), true
		}
		// `ctx history|latest|session ...` are `cbth ctx ...`.
		if len(args) >= 1 && (args[0] == "history" || args[0] == "latest" || args[0] == "session") {
			return run(append([]string{"cbth", "ctx"}, args...), os.Stdout, os.Stderr), true
		}
		// `ctx agent/<name> [session]` is the same on an agent's socket.
		if len(args) >= 1 && len(args) <= 2 && strings.HasPrefix(args[0], "agent/") {
			nm := strings.TrimPrefix(args[0], "agent/")
			sess := socket.DefaultSession
			if len(args) == 2 {
				sess = args[1]
			}
			for _, c := range []string{nm, sess} {
				if err := name.Valid(c); err != nil {
					fmt.Fprintf(os.Stderr, "ctx: %s: %v\n", errs.CodeOf(err), err)
					return errs.CodeOf(err).ExitCode(), true
				}
			}
			return chatServed("agent/"+nm, sess), true
		}
		return 0, false
	}
	return 0, false
}

// chatLine is the command line of `ctx model/<provider>/<model> [session]`.
type chatLine struct {
	Model   string `arg:"" help:"model/<provider>/<model>, a session=socket model."`
	Session string `arg:"" optional:"" help:"The session to talk in (default: ${default_session})."`
}

func ctxChat(args []string) (code int) {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "ctx: %s: %v\n", errs.CodeOf(err), err)
		return errs.CodeOf(err).ExitCode()
	}
	var line chatLine
	p, err := kong.New(&line, kong.Name("ctx"), kong.Description("Talk to a model's socket: each input line is one turn."),
		kong.Vars{"default_session": socket.DefaultSession},
		kong.Exit(func(code int) { panic(exitCode(code)) }))
	if err != nil {
		return fail(errs.Wrap(errs.EINTERNAL, err, "command line"))
	}
	defer catchExit(&code)
	if _, err := p.Parse(args); err != nil {
		return fail(errs.Wrap(errs.EINVAL, err, "usage"))
	}
	id, err := name.ParseModel(strings.TrimPrefix(line.Model, "model/"))
	if err != nil {
		return fail(err)
	}
	sess := socket.DefaultSession
	if line.Session != "" {
		if err := name.Valid(line.Session); err != nil {
			return fail(err)
		}
		sess = line.Session
	}
	return chatServed("model/"+id.String(), sess)
}

// chatServed is the interactive session on object's socket ("agent/N",
// "model/P/M") as the daemon serves it: like every other command it
// starts the daemon when none runs, asks it to serve the socket, and
// holds it up for as long as the session lasts. A tree the daemon does
// not know (a bare tree) is dialled as it is.
func chatServed(object, sess string) int {
	e := &Env{Stdout: io.Discard, Stderr: os.Stderr, Getenv: os.Getenv}
	root := cortexEnv(e).CtxRoot
	sock, _, _, release, err := daemonTrees{e}.Hold(root, object)
	switch {
	case errs.CodeOf(err) == errs.ENOENT:
		sock = filepath.Join(root, object) + ".sock"
	case err != nil:
		fmt.Fprintf(os.Stderr, "ctx: %s: %v\n", errs.CodeOf(err), err)
		return errs.CodeOf(err).ExitCode()
	default:
		defer release()
	}
	return chatOn(sock, sess)
}

// chatOn is the interactive session on a model's or an agent's socket:
// each input line is one turn; the first SIGINT cancels the run, the
// second exits.
func chatOn(path, sess string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "ctx: %s: %v\n", errs.CodeOf(err), err)
		return errs.CodeOf(err).ExitCode()
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail(errs.New(errs.ENOENT, "%s does not exist (session=none, or not served)", path))
		}
		return fail(errs.Wrap(errs.EHOSTDOWN, err, "%s is not answering", path))
	}
	defer conn.Close()
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	if err := socket.Chat(context.Background(), conn, sess, os.Stdin, os.Stdout, os.Stderr, sig); err != nil {
		return fail(err)
	}
	return 0
}

// daemonJobs is cbth.job.submit's way to the daemon from a tool or agent
// process: the job.submit operation, starting the daemon when needed.
type daemonJobs struct{ env *Env }

func (d daemonJobs) Submit(_ context.Context, j tool.Job) (string, error) {
	rep, err := call(d.env, api.JobSubmit, api.SubmitArgs{TargetKind: command.Target(j.TargetKind), SourceThreadID: j.ThreadID, TaskKind: j.TaskKind, TaskSummary: j.Summary, DedupeKey: j.DedupeKey})
	return rep.JobID, err
}
