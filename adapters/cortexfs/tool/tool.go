package tool

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/internal/confine"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/plural"
)

// Built-in tool names.
const (
	FSRead    = "fs.read"
	FSList    = "fs.list"
	FSWrite   = "fs.write"
	FSSearch  = "fs.search"
	ShellExec = "shell.exec"
	JobSubmit = "cbth.job.submit"
)

// Acts reports whether a tool changes things: runs commands or writes
// files. The rest only read, or (cbth.job.submit) ask the daemon for a
// job. An agent with an acting tool takes job results only as its
// delivery trust allows (spec/cortexfs.md, "The ctx delivery target").
func Acts(name string) bool { return name == ShellExec || name == FSWrite }

// Limits a tool run has unless its Env says otherwise.
const (
	DefaultTimeout   = 30 * time.Second
	DefaultMaxOutput = 64 << 10
	// MaxMatches bounds fs.search's answer.
	MaxMatches = 200
)

// Job is what cbth.job.submit asks for.
type Job struct {
	TargetKind string `json:"target_kind"`
	ThreadID   string `json:"source_thread_id"`
	TaskKind   string `json:"task_kind"`
	Summary    string `json:"task_summary"`
	DedupeKey  string `json:"dedupe_key,omitempty"`
}

// Jobs submits jobs: the daemon itself when the agent runs there, its
// socket when a tool runs as a process.
type Jobs interface {
	Submit(ctx context.Context, j Job) (jobID string, err error)
}

// Env is where a tool call runs.
type Env struct {
	// Root is the agent root, opened with os.Root; RootDir is its host
	// path (shell.exec needs a real directory to start in).
	Root    *os.Root
	RootDir string
	// Cwd is the session's working directory, rooted ("/" is Root).
	Cwd       string
	Timeout   time.Duration
	MaxOutput int
	Jobs      Jobs
	// Thread is the session the agent runs in as a thread id
	// ("agent/<name>/<session>"): where cbth.job.submit sends a job's
	// result by default. Empty outside a session.
	Thread string
}

func (e Env) maxOutput() int {
	if e.MaxOutput > 0 {
		return e.MaxOutput
	}
	return DefaultMaxOutput
}

// Spec describes a built-in tool.
type Spec struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments object: what an
	// agent's driver offers the model (spec/cortexfs.md, "Tool calling
	// on network models").
	Parameters json.RawMessage
	run        func(ctx context.Context, env Env, args json.RawMessage) (string, error)
}

// schema builds an object schema from (name, type, description) triples.
func schema(required []string, props ...[3]string) json.RawMessage {
	p := map[string]any{}
	for _, t := range props {
		p[t[0]] = map[string]string{"type": t[1], "description": t[2]}
	}
	b, _ := json.Marshal(map[string]any{"type": "object", "properties": p, "required": required})
	return b
}

// builtins is built on first use: its schemas are marshalled, and every
// cbth command links this package, most never needing a tool.
var builtins = sync.OnceValue(func() []Spec {
	return []Spec{
		{FSRead, "read a file inside the agent root: {\"path\":P}",
			schema([]string{"path"}, [3]string{"path", "string", "file path, relative to the cwd or absolute inside the root"}), fsRead},
		{FSList, "list a directory inside the agent root: {\"path\":P}",
			schema([]string{}, [3]string{"path", "string", "directory path (default the cwd)"}), fsList},
		{FSWrite, "write a file inside the agent root: {\"path\":P,\"content\":TEXT}",
			schema([]string{"path", "content"}, [3]string{"path", "string", "file path"}, [3]string{"content", "string", "the whole new contents"}), fsWrite},
		{FSSearch, "search files under a directory for a substring: {\"pattern\":S,\"path\":P}",
			schema([]string{"pattern"}, [3]string{"pattern", "string", "substring to find"}, [3]string{"path", "string", "directory to search (default the cwd)"}), fsSearch},
		{ShellExec, "run a shell command in the session's cwd: {\"command\":CMD,\"timeout_ms\":N}",
			schema([]string{"command"}, [3]string{"command", "string", "sh -c command line"}, [3]string{"timeout_ms", "integer", "timeout in milliseconds"}), shellExec},
		{JobSubmit, "start a background job whose result comes back to this session: {\"summary\":TEXT}",
			schema([]string{"summary"}, [3]string{"summary", "string", "what the job does"}, [3]string{"kind", "string", "task kind (default agent)"},
				[3]string{"target", "string", "delivery target (default this session's ctx)"}, [3]string{"thread_id", "string", "thread the result goes to"},
				[3]string{"dedupe_key", "string", "idempotency key"}), jobSubmit},
	}
})

// Builtins lists the built-in tools in a fixed order.
func Builtins() []Spec { return append([]Spec(nil), builtins()...) }

// Lookup finds a built-in tool.
func Lookup(name string) (Spec, bool) {
	for _, s := range builtins() {
		if s.Name == name {
			return s, true
		}
	}
	return Spec{}, false
}

// Run runs tool name with args (one JSON object) and returns its result
// text. Errors carry stable codes (EINVAL bad arguments, ENOENT, EACCES
// outside the root, ETIMEDOUT, ENOENT for an unknown tool).
func Run(ctx context.Context, env Env, name string, args json.RawMessage) (string, error) {
	s, ok := Lookup(name)
	if !ok {
		return "", errs.New(errs.ENOENT, "no tool %s", name)
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(args, &probe); err != nil || probe == nil {
		return "", errs.New(errs.EINVAL, "%s: arguments must be one JSON object", name)
	}
	if env.Cwd == "" {
		env.Cwd = "/"
	}
	if env.Root == nil && name != JobSubmit {
		return "", errs.New(errs.ENOTCONF, "%s: no agent root", name)
	}
	return s.run(ctx, env, args)
}

func decode(name string, args json.RawMessage, v any) error {
	if err := json.Unmarshal(args, v); err != nil {
		return errs.Wrap(errs.EINVAL, err, "%s: bad arguments", name)
	}
	return nil
}

func (e Env) resolve(p string) (string, error) {
	if p == "" {
		p = "."
	}
	return Clean(e.Cwd, p)
}

func fsRead(_ context.Context, env Env, args json.RawMessage) (string, error) {
	var a struct {
		Path string `json:"path"`
	}
	if err := decode(FSRead, args, &a); err != nil {
		return "", err
	}
	if a.Path == "" {
		return "", errs.New(errs.EINVAL, "fs.read needs a path")
	}
	p, err := env.resolve(a.Path)
	if err != nil {
		return "", err
	}
	f, err := openRegular(env.Root, rel(p), a.Path, os.O_RDONLY)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(env.maxOutput())+1))
	if err != nil {
		return "", fsErr(err, a.Path)
	}
	if len(b) > env.maxOutput() {
		return "", errs.New(errs.EFBIG, "%s is larger than the %d bytes a tool answer may hold", a.Path, env.maxOutput())
	}
	return string(b), nil
}

func fsList(_ context.Context, env Env, args json.RawMessage) (string, error) {
	var a struct {
		Path string `json:"path"`
	}
	if err := decode(FSList, args, &a); err != nil {
		return "", err
	}
	p, err := env.resolve(a.Path)
	if err != nil {
		return "", err
	}
	ents, err := fs.ReadDir(env.Root.FS(), rel(p))
	if err != nil {
		return "", fsErr(err, p)
	}
	var b strings.Builder
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		n = lineSafe(n)
		if b.Len()+len(n)+1 > env.maxOutput() {
			break
		}
		b.WriteString(n + "\n")
	}
	return b.String(), nil
}

func fsWrite(_ context.Context, env Env, args json.RawMessage) (string, error) {
	var a struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
	}
	if err := decode(FSWrite, args, &a); err != nil {
		return "", err
	}
	if a.Path == "" || a.Content == nil {
		return "", errs.New(errs.EINVAL, "fs.write needs a path and content")
	}
	p, err := env.resolve(a.Path)
	if err != nil {
		return "", err
	}
	if p == "/" {
		return "", errs.New(errs.EINVAL, "fs.write: %s is the root", a.Path)
	}
	if dir := path.Dir(p); dir != "/" {
		if err := env.Root.MkdirAll(rel(dir), 0o700); err != nil {
			return "", fsErr(err, dir)
		}
	}
	f, err := openRegular(env.Root, rel(p), a.Path, os.O_CREATE|os.O_WRONLY)
	if err != nil {
		return "", err
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return "", fsErr(err, a.Path)
	}
	if _, err := io.WriteString(f, *a.Content); err != nil {
		f.Close()
		return "", fsErr(err, a.Path)
	}
	if err := f.Close(); err != nil {
		return "", fsErr(err, a.Path)
	}
	return fmt.Sprintf("wrote %s to %s", plural.Count(len(*a.Content), "byte", "bytes"), p), nil
}

func fsSearch(ctx context.Context, env Env, args json.RawMessage) (string, error) {
	var a struct {
		Pattern string `json:"pattern"`
		Path    string `json:"path"`
	}
	if err := decode(FSSearch, args, &a); err != nil {
		return "", err
	}
	if a.Pattern == "" {
		return "", errs.New(errs.EINVAL, "fs.search needs a pattern")
	}
	p, err := env.resolve(a.Path)
	if err != nil {
		return "", err
	}
	fsys := env.Root.FS()
	var out []string
	size := 0
	werr := fs.WalkDir(fsys, rel(p), func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			if fp == rel(p) {
				return err
			}
			return nil // an unreadable entry below is skipped
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !d.Type().IsRegular() {
			return nil // directories are walked, symlinks never followed
		}
		// Opened again by name: what is there now may be a FIFO.
		f, err := openRegular(env.Root, fp, fp, os.O_RDONLY)
		if err != nil {
			return nil
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for n := 1; sc.Scan(); n++ {
			if !strings.Contains(sc.Text(), a.Pattern) {
				continue
			}
			line := fmt.Sprintf("%s:%d:%s", lineSafe("/"+fp), n, strings.ToValidUTF8(sc.Text(), "\uFFFD"))
			if len(out) >= MaxMatches || size+len(line)+1 > env.maxOutput() {
				return fs.SkipAll
			}
			out = append(out, line)
			size += len(line) + 1
		}
		return nil
	})
	if werr != nil {
		return "", fsErr(werr, p)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "", nil
	}
	return strings.Join(out, "\n") + "\n", nil
}

// lineSafe renders a file name for a line-per-entry answer: as it is,
// unless it could forge or break a line (a control character such as a
// newline, invalid UTF-8, or a leading double quote), in which case it
// is a JSON string. A model reading the answer can so tell every entry
// from the next, and a quoted name from a plain one.
func lineSafe(name string) string {
	if !utf8.ValidString(name) || strings.HasPrefix(name, `"`) || strings.ContainsFunc(name, unicode.IsControl) {
		b, _ := json.Marshal(strings.ToValidUTF8(name, "\uFFFD"))
		return string(b)
	}
	return name
}

// ShellResult is shell.exec's answer.
type ShellResult struct {
	ExitCode  int    `json:"exit_code"`
	Output    string `json:"output"`
	Truncated bool   `json:"truncated,omitempty"`
}

// capped keeps the first max bytes written and counts the rest.
type capped struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room < len(p) {
		c.truncated = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}

func shellExec(ctx context.Context, env Env, args json.RawMessage) (string, error) {
	var a struct {
		Command   string `json:"command"`
		TimeoutMS int64  `json:"timeout_ms"`
	}
	if err := decode(ShellExec, args, &a); err != nil {
		return "", err
	}
	if strings.TrimSpace(a.Command) == "" {
		return "", errs.New(errs.EINVAL, "shell.exec needs a command")
	}
	// The working directory is opened inside the root and handed to the
	// process as that open directory: what was checked is what it runs
	// in, whatever is renamed in between.
	dir, err := openCwd(env.Root, env.Cwd)
	if err != nil {
		return "", err
	}
	defer dir.Close()
	timeout := env.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if a.TimeoutMS > 0 && time.Duration(a.TimeoutMS)*time.Millisecond < timeout {
		timeout = time.Duration(a.TimeoutMS) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Confined (where the system can) to the agent root read-write and
	// the system's directories read-only, with a fixed environment: none
	// of the caller's variables reach the command.
	cmd, err := confine.Command(ctx, confine.Policy{RW: []string{env.RootDir}, Scoped: true}, dir, []string{"/bin/sh", "-c", a.Command},
		[]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + env.RootDir, "LANG=C.UTF-8", "TERM=dumb"})
	if err != nil {
		return "", errs.Wrap(errs.EINTERNAL, err, "shell.exec")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The whole process group goes when the time is up, and output
	// still held open by a grandchild does not keep the call waiting.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	out := &capped{max: env.maxOutput()}
	cmd.Stdout, cmd.Stderr = out, out
	if err = cmd.Start(); err == nil {
		// The daemon refuses to act for its processes (confine.Tracker).
		confine.Started(ctx, cmd)
		err = cmd.Wait()
	}
	if ctx.Err() == context.DeadlineExceeded {
		return "", errs.New(errs.ETIMEDOUT, "shell.exec: the command ran over %s", timeout)
	}
	res := ShellResult{Output: out.buf.String(), Truncated: out.truncated}
	if err != nil {
		var ee *exec.ExitError
		if !asExit(err, &ee) {
			return "", errs.Wrap(errs.EINTERNAL, err, "shell.exec")
		}
		res.ExitCode = ee.ExitCode()
	}
	b, _ := json.Marshal(res)
	return string(b), nil
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*ee = e
	}
	return ok
}

// JobResult is cbth.job.submit's answer.
type JobResult struct {
	JobID      string `json:"job_id"`
	TargetKind string `json:"target_kind"`
	ThreadID   string `json:"source_thread_id"`
}

func jobSubmit(ctx context.Context, env Env, args json.RawMessage) (string, error) {
	var a struct {
		Summary   string `json:"summary"`
		Kind      string `json:"kind"`
		Target    string `json:"target"`
		ThreadID  string `json:"thread_id"`
		DedupeKey string `json:"dedupe_key"`
	}
	if err := decode(JobSubmit, args, &a); err != nil {
		return "", err
	}
	if a.Summary == "" {
		return "", errs.New(errs.EINVAL, "cbth.job.submit needs a summary")
	}
	if a.Target == "" && a.ThreadID == "" && env.Thread != "" {
		// Inside a session the result comes back to it by default.
		a.Target, a.ThreadID = "ctx", env.Thread
	}
	if a.Target == "" || a.ThreadID == "" {
		return "", errs.New(errs.EINVAL, "cbth.job.submit outside a session needs target and thread_id")
	}
	if a.Kind == "" {
		a.Kind = "agent"
	}
	if env.Jobs == nil {
		return "", errs.New(errs.ENOTCONF, "cbth.job.submit: no daemon to submit to")
	}
	id, err := env.Jobs.Submit(ctx, Job{TargetKind: a.Target, ThreadID: a.ThreadID, TaskKind: a.Kind, Summary: a.Summary, DedupeKey: a.DedupeKey})
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(JobResult{JobID: id, TargetKind: a.Target, ThreadID: a.ThreadID})
	return string(b), nil
}
