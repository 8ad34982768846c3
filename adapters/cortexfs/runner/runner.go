// Package runner is the CortexFS object runner: the program named in every
// object's shebang. The kernel starts it as `runner <object path> [args...]`;
// it reads the object's metadata and control files, takes input from argv or
// stdin, and writes the canonical JSONL stream to stdout.
package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"strconv"
	"time"

	"github.com/alecthomas/kong"
	"github.com/cbth-dev/cbth/adapters/cortexfs/agent"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tool"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tree"
	"github.com/cbth-dev/cbth/internal/confine"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// ProgramName is the name the binary answers to as the object runner.
const ProgramName = "cortexfs-object-runner"

// MaxInput bounds what is read from stdin; more is EMSGSIZE.
const MaxInput = 8 << 20

// Env is everything Main needs from its process, passed in so tests and
// the daemon can run it in-process.
type Env struct {
	Context context.Context
	// Interrupt, when set, wraps the context of a driver call that may
	// block (any driver but a driver.InProcess one) so that the process's
	// interrupts cancel it. It is applied per call, not at start, because
	// installing signal handlers costs every run, the echo one included.
	Interrupt func(context.Context) (context.Context, context.CancelFunc)
	// StdinIsTTY selects the TTY rules when no argv input is given.
	StdinIsTTY bool
	Drivers    driver.Set
	NewRunID   func() string
	// Now is the clock the model's .d/log records calls by (nil: the
	// system clock).
	Now func() time.Time
	// Jobs lets cbth.job.submit reach the daemon (nil: ENOTCONF).
	Jobs tool.Jobs
	// Interactive, when set, runs an interactive session on an agent's
	// socket (an agent run with no argv on a TTY); it returns the exit
	// status.
	Interactive func(sock string) int
}

// Object is a loaded object: where it really is and what its files say.
type Object struct {
	// Path is the resolved path of the executable file (symlinks followed:
	// readlink decides identity).
	Path string
	object.Object
}

// Load reads the object at path, following alias symlinks.
func Load(path string) (Object, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Object{}, errs.New(errs.ENOENT, "no object at %s", path)
		}
		return Object{}, errs.Wrap(errs.EACCES, err, "resolve %s", path)
	}
	meta, err := readSmall(real)
	if err != nil {
		var coded *errs.Error
		if errors.As(err, &coded) {
			return Object{}, err
		}
		if errors.Is(err, fs.ErrPermission) {
			return Object{}, errs.Wrap(errs.EACCES, err, "read %s", path)
		}
		return Object{}, errs.Wrap(errs.ENOENT, err, "read %s", path)
	}
	_, m, err := object.ParseMeta(meta)
	if err != nil {
		return Object{}, err
	}
	ctl := map[string]string{}
	files := []string{object.FileID, object.FileDriver, object.FileCap, object.FileDefault, object.FileSession, object.FileStatus, object.FileLog}
	if m.Type == object.KindAgent {
		files = append(files, object.AgentFiles...)
	}
	for _, f := range files {
		b, err := readSmall(filepath.Join(real+".d", f))
		var coded *errs.Error
		switch {
		case errors.As(err, &coded):
			return Object{}, err
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return Object{}, errs.Wrap(errs.EACCES, err, "read control file %s", f)
		}
		ctl[f] = string(b)
	}
	rel := m.ID
	if m.Type != object.KindModel {
		rel = filepath.Base(real)
	}
	o, err := object.FromFiles(m.Type, rel, meta, ctl)
	if err != nil {
		return Object{}, err
	}
	return Object{Path: real, Object: o}, nil
}

// MaxObjectFile bounds a metadata or control file.
const MaxObjectFile = 1 << 20

// readSmall reads a metadata or control file, refusing one over
// MaxObjectFile.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxObjectFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxObjectFile {
		return nil, errs.New(errs.EMSGSIZE, "%s is larger than %d bytes", path, MaxObjectFile)
	}
	return b, nil
}

// options is the runner's command line after the object path: runner
// flags, then the input words. `--` ends the flags, so an input word that
// starts with '-' goes after it.
type options struct {
	Object string   `arg:"" help:"The object (the kernel passes it from the #! line)."`
	Text   bool     `help:"Print the answer as text and errors on stderr, for people."`
	Help   bool     `short:"h" help:"Print the object's usage."`
	Args   []string `arg:"" optional:"" name:"input" help:"Input words, joined by spaces into one message."`
}

func parseArgs(args []string) (options, error) {
	var o options
	p, err := kong.New(&o, kong.Name(ProgramName), kong.NoDefaultHelp())
	if err == nil {
		_, err = p.Parse(args)
	}
	return o, err
}

// Main runs one invocation and returns the exit status. args[0] is the
// object path the kernel passed.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer, env Env) int {
	if env.Context == nil {
		env.Context = context.Background()
	}
	opt, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s: %v\nusage: %s OBJECT [--text] [--] [INPUT...]\n(objects run this program through their #! line)\n",
			ProgramName, errs.EINVAL, err, ProgramName)
		return errs.ExitUsage
	}
	obj, err := Load(opt.Object)
	if err != nil {
		return fail(stderr, err)
	}
	if opt.Help {
		fmt.Fprint(stdout, usage(obj))
		return errs.ExitOK
	}
	if w := unconfinedWarning(obj, confine.Check()); w != "" {
		fmt.Fprint(stderr, w)
	}
	switch obj.Kind {
	case object.KindModel:
		return runModel(obj, opt, stdin, stdout, stderr, env)
	case object.KindAgent:
		return runAgent(obj, opt, stdin, stdout, stderr, env)
	case object.KindTool:
		return runTool(obj, opt, stdin, stdout, stderr, env)
	default:
		return fail(stderr, errs.New(errs.EINVAL, "object type %q is not runnable", obj.Kind))
	}
}

// unconfinedWarning is what an object that runs shell.exec (the tool
// itself, or an agent with it) prints on stderr where st says this system
// cannot confine it: loud, every time, since the command runs but is not
// kept to the root. "" where it is confined or runs no shell.
func unconfinedWarning(obj Object, st confine.Status) string {
	shell := obj.Kind == object.KindTool && obj.Object.Path == tool.ShellExec || slices.Contains(obj.Tools, tool.ShellExec)
	if !shell || st.Available {
		return ""
	}
	return fmt.Sprintf("%s: WARNING: shell.exec runs UNCONFINED here (%s); see cbth doctor\n", ProgramName, st.Mechanism)
}

func usage(o Object) string {
	switch o.Kind {
	case object.KindModel:
		return fmt.Sprintf("usage: %s [--text] [--] TEXT...\n       echo TEXT | %[1]s\n       echo '{\"messages\":[{\"role\":\"user\",\"content\":\"...\"}]}' | %[1]s\nmodel %s: one stateless call, JSONL events on stdout.\n", o.Path, o.Meta.ID)
	case object.KindTool:
		return fmt.Sprintf("usage: %s '{JSON arguments}'\n       echo '{JSON arguments}' | %[1]s\n", o.Path)
	default:
		return fmt.Sprintf("usage: %s TASK...\n       echo '{\"task\":\"...\"}' | %[1]s\n", o.Path)
	}
}

// fail reports an error that happened before any JSONL was written: to
// stderr, with the exit status of its code.
func fail(stderr io.Writer, err error) int {
	code := errs.CodeOf(err)
	fmt.Fprintf(stderr, "%s: %s: %s\n", ProgramName, code, stream.PublicMessage(err))
	return code.ExitCode()
}

// readStdin reads all input up to MaxInput.
func readStdin(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, errs.New(errs.EINVAL, "no input")
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxInput+1))
	if err != nil {
		return nil, errs.Wrap(errs.EINVAL, err, "read stdin")
	}
	if len(b) > MaxInput {
		return nil, errs.New(errs.EMSGSIZE, "input is larger than %d bytes", MaxInput)
	}
	return b, nil
}

// modelInput builds the messages of a model call from argv or stdin.
func modelInput(opt options, stdin io.Reader, env Env) ([]driver.Message, error) {
	if len(opt.Args) > 0 {
		return []driver.Message{{Role: driver.RoleUser, Content: strings.Join(opt.Args, " ")}}, nil
	}
	b, err := readStdin(stdin)
	if err != nil {
		return nil, err
	}
	text := strings.TrimRight(string(b), "\r\n")
	if strings.TrimSpace(text) == "" {
		return nil, errs.New(errs.EINVAL, "empty input")
	}
	if strings.HasPrefix(strings.TrimSpace(text), "{") {
		var in struct {
			Messages []driver.Message `json:"messages"`
			Input    *string          `json:"input"`
		}
		if err := json.Unmarshal([]byte(text), &in); err != nil {
			return nil, errs.Wrap(errs.EINVAL, err, "input looks like JSON but does not parse")
		}
		if in.Input != nil {
			in.Messages = append(in.Messages, driver.Message{Role: driver.RoleUser, Content: *in.Input})
		}
		if err := driver.ValidateMessages(in.Messages); err != nil {
			return nil, err
		}
		return in.Messages, nil
	}
	return []driver.Message{{Role: driver.RoleUser, Content: text}}, nil
}

func runModel(obj Object, opt options, stdin io.Reader, stdout, stderr io.Writer, env Env) int {
	id, err := name.ParseModel(obj.Meta.ID)
	if err != nil {
		return fail(stderr, err)
	}
	if len(opt.Args) == 0 && env.StdinIsTTY {
		// A REPL is allowed but not required on a TTY; a short usage
		// keeps a stray invocation from waiting on the keyboard.
		fmt.Fprint(stderr, usage(obj))
		return errs.ExitUsage
	}
	msgs, err := modelInput(opt, stdin, env)
	if err != nil {
		return fail(stderr, err)
	}
	drvName, drv, err := env.Drivers.Pick(obj.Driver.Resolve(object.RouteExec))
	if err != nil {
		recordCall(obj.Path, tree.Call{At: env.now(), Via: object.RouteExec, Code: errs.CodeOf(err)})
		return fail(stderr, err)
	}
	req := driver.Request{Model: id.String(), Provider: id.Provider, NativeID: obj.NativeID, Messages: msgs, Defaults: obj.Defaults, Caps: obj.Caps}
	ctx, stop := env.Context, context.CancelFunc(func() {})
	_, local := drv.(driver.InProcess)
	if !local {
		ctx, stop = env.interruptible()
	}
	defer stop()
	run := env.newRunID()
	logged := LogCalls(drv, obj.Path, object.RouteExec, drvName, run, env.now)
	if local {
		// An in-process answer is complete at once: write it in one go.
		bw := bufio.NewWriterSize(stdout, 4096)
		code := Run(ctx, logged, req, out(bw, stderr, opt.Text), run)
		if err := bw.Flush(); err != nil && code == errs.ExitOK {
			return errs.ExitGeneric
		}
		return code
	}
	return Run(ctx, logged, req, out(stdout, stderr, opt.Text), run)
}

// LogCalls wraps drv, the driver route picked for calls of the model at
// modelPath, so each call it makes is recorded in the model's .d/log and
// .d/status when it ends (tree.RecordCall): the route and driver, how it
// ended, its duration and token counts; never its content. run is the
// call's run id when it has its own (a one-shot exec). Recording is best
// effort: a tree the caller cannot write to leaves the call as it was.
func LogCalls(drv driver.Driver, modelPath, via, name, run string, now func() time.Time) driver.Driver {
	if now == nil {
		now = time.Now
	}
	return loggedDriver{Driver: drv, dir: modelPath + ".d", via: via, name: name, run: run, now: now}
}

type loggedDriver struct {
	driver.Driver
	dir, via, name, run string
	now                 func() time.Time
}

// Stream implements driver.Driver.
func (l loggedDriver) Stream(ctx context.Context, req driver.Request, sink stream.Sink) error {
	start := l.now()
	c := tree.Call{At: start, Run: l.run, Via: l.via, Driver: l.name}
	err := l.Driver.Stream(ctx, req, stream.SinkFunc(func(e stream.Event) error {
		if e.Type == stream.TypeUsage {
			c.InputTokens, c.OutputTokens = e.InputTokens, e.OutputTokens
		}
		return sink.Emit(e)
	}))
	c.Duration = l.now().Sub(start)
	if c.Cancelled = driver.Canceled(ctx, err); err != nil && !c.Cancelled {
		c.Code = errs.CodeOf(err)
	}
	_ = tree.RecordCall(l.dir, c)
	return err
}

// recordCall records a call that failed before any driver ran (no driver
// of its route in this build).
func recordCall(modelPath string, c tree.Call) {
	_ = tree.RecordCall(modelPath+".d", c)
}

// now is the Env's clock.
func (e Env) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// interruptible is the run's context, ended by an interrupt when Env
// says how to catch one.
func (e Env) interruptible() (context.Context, context.CancelFunc) {
	if e.Interrupt == nil {
		return e.Context, func() {}
	}
	return e.Interrupt(e.Context)
}

func (e Env) newRunID() string {
	if e.NewRunID != nil {
		return e.NewRunID()
	}
	return "r1"
}

// Run frames one driver call on w and returns the exit status: 0 when done
// is ok, the code's status after an error frame, 1 when cancelled.
func Run(ctx context.Context, drv driver.Driver, req driver.Request, w io.Writer, run string) int {
	return framed(ctx, w, run, req.Model, func(sw *stream.Writer) error { return drv.Stream(ctx, req, sw) })
}

// framed frames one run on w: the start frame (model, "" for none), what
// body emits, and done, or an error frame and done when body fails. It
// returns Run's exit status.
func framed(ctx context.Context, w io.Writer, run, model string, body func(*stream.Writer) error) int {
	sw := stream.NewWriter(w, run)
	if err := sw.Start(model); err != nil {
		return errs.ExitInternal
	}
	err := body(sw)
	cancelled := driver.Canceled(ctx, err)
	code, werr := sw.Finish(err, cancelled)
	if werr != nil || cancelled {
		return errs.ExitGeneric
	}
	return code.ExitCode()
}

func runAgent(obj Object, opt options, stdin io.Reader, stdout, stderr io.Writer, env Env) int {
	task := strings.Join(opt.Args, " ")
	if len(opt.Args) == 0 {
		if env.StdinIsTTY {
			if env.Interactive != nil {
				return env.Interactive(obj.Path + ".sock")
			}
			return fail(stderr, errs.New(errs.ENOTCONF, "agent %s: an interactive session needs its socket", obj.Path))
		}
		b, err := readStdin(stdin)
		if err != nil {
			return fail(stderr, err)
		}
		var in struct {
			Task *string `json:"task"`
		}
		t := strings.TrimSpace(string(b))
		switch {
		case strings.HasPrefix(t, "{"):
			if err := json.Unmarshal(b, &in); err != nil || in.Task == nil || *in.Task == "" {
				return fail(stderr, errs.New(errs.EINVAL, "agent input must be {\"task\": \"...\"} or plain text"))
			}
			task = *in.Task
		case t == "":
			return fail(stderr, errs.New(errs.EINVAL, "empty input"))
		default:
			task = strings.TrimRight(string(b), "\r\n")
		}
	}
	loop, closeRoot, err := LoadAgent(obj, env)
	if err != nil {
		return fail(stderr, err)
	}
	defer closeRoot()
	ctx, stop := env.interruptible()
	defer stop()
	return framed(ctx, stdout, env.newRunID(), loop.Request.Model, func(sw *stream.Writer) error {
		_, err := loop.Task(ctx, task, sw.Emit)
		return err
	})
}

// LoadAgent builds an agent's loop from its object: the model object its
// .d/model names (in the same tree), the driver its route table gives
// agents, its tools and its root (opened; closeRoot releases it).
func LoadAgent(obj Object, env Env) (loop *agent.Loop, closeRoot func(), err error) {
	ctxRoot := filepath.Dir(filepath.Dir(obj.Path))
	id, err := name.ParseModel(obj.Model)
	if err != nil {
		return nil, nil, err
	}
	mobj, err := Load(filepath.Join(ctxRoot, "model", id.Provider, id.Model))
	if err != nil {
		return nil, nil, err
	}
	drvName, drv, err := env.Drivers.Pick(mobj.Driver.Resolve(object.RouteAgent))
	if err != nil {
		recordCall(mobj.Path, tree.Call{At: env.now(), Via: object.RouteAgent, Code: errs.CodeOf(err)})
		return nil, nil, err
	}
	drv = LogCalls(drv, mobj.Path, object.RouteAgent, drvName, "", env.now)
	rootDir := obj.Root
	if rootDir == "" {
		rootDir = filepath.Join(ctxRoot, "home", strconv.Itoa(os.Getuid()), "agent", obj.Meta.Name, "root")
	}
	r, err := agent.OpenRoot(rootDir)
	if err != nil {
		return nil, nil, err
	}
	cwd := obj.Cwd
	if cwd == "" {
		cwd = "/"
	}
	loop = &agent.Loop{Name: filepath.Base(obj.Path),
		Request: driver.Request{Model: id.String(), Provider: id.Provider, NativeID: mobj.NativeID, Defaults: mobj.Defaults, Caps: mobj.Caps},
		Driver:  drv, Tools: obj.Tools, TrustedAll: obj.Delivery == object.TrustedAll,
		Env: tool.Env{Root: r, RootDir: rootDir, Cwd: cwd, Jobs: env.Jobs}}
	return loop, func() { r.Close() }, nil
}

func runTool(obj Object, opt options, stdin io.Reader, stdout, stderr io.Writer, env Env) int {
	var raw []byte
	switch {
	case len(opt.Args) > 0:
		raw = []byte(strings.Join(opt.Args, " "))
	case env.StdinIsTTY:
		fmt.Fprint(stderr, usage(obj))
		return errs.ExitUsage
	default:
		b, err := readStdin(stdin)
		if err != nil {
			return fail(stderr, err)
		}
		raw = b
	}
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return fail(stderr, errs.New(errs.EINVAL, "tool arguments must be one JSON object"))
	}
	nm := filepath.Base(obj.Path)
	if _, ok := tool.Lookup(nm); !ok {
		return fail(stderr, errs.New(errs.ENOTCONF, "tool %s: no such built-in tool in this build", nm))
	}
	// Run as a process, a tool's root is the directory it was started
	// in: it sees nothing above it.
	dir, err := os.Getwd()
	if err != nil {
		return fail(stderr, errs.Wrap(errs.EINTERNAL, err, "working directory"))
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return fail(stderr, errs.Wrap(errs.EACCES, err, "open %s", dir))
	}
	defer r.Close()
	ctx, stop := env.interruptible()
	defer stop()
	return framed(ctx, stdout, env.newRunID(), "", func(sw *stream.Writer) error {
		out, err := tool.Run(ctx, tool.Env{Root: r, RootDir: dir, Cwd: "/", Jobs: env.Jobs}, nm, raw)
		if err != nil {
			return err
		}
		return sw.Emit(stream.Event{Type: stream.TypeMessage, Role: driver.RoleTool, Name: nm, Content: []stream.Part{{Type: "text", Text: out}}})
	})
}
