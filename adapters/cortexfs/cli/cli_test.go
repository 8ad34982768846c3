package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
	"github.com/cbth-dev/cbth/internal/errs"
)

// root mirrors how cbth embeds these commands: --json is a global flag.
type root struct {
	JSON    bool       `name:"json"`
	Ctx     CtxCmd     `cmd:""`
	Model   ModelCmd   `cmd:""`
	Agent   AgentCmd   `cmd:""`
	Install InstallCmd `cmd:""`
}

func run(t *testing.T, env *Env, args ...string) (string, error) {
	t.Helper()
	var r root
	var out bytes.Buffer
	env.Stdout = &out
	p, err := kong.New(&r, kong.Name("cbth"), kong.Exit(func(int) { t.Fatalf("kong exited on %v", args) }))
	if err != nil {
		t.Fatal(err)
	}
	kctx, err := p.Parse(args)
	if err != nil {
		return "", errs.Wrap(errs.EINVAL, err, "parse")
	}
	env.JSON = r.JSON
	err = kctx.Run(env)
	return out.String(), err
}

func testEnv(t *testing.T) *Env {
	dir := t.TempDir()
	e := DefaultEnv(func(k string) (string, bool) {
		if k == "CBTH_HOME" {
			return filepath.Join(dir, "home"), true
		}
		return "", false
	}, dir)
	e.Runner = filepath.Join(dir, "bin", "cortexfs-object-runner")
	if err := os.MkdirAll(filepath.Dir(e.Runner), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.Runner, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.UID = 1000
	e.Now = func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }
	e.Stderr = &bytes.Buffer{}
	return &e
}

func TestDefaultEnv(t *testing.T) {
	e := DefaultEnv(func(string) (string, bool) { return "", false }, "/home/u")
	if e.CBTHHome != "/home/u/.cbth" || e.CtxRoot != "/home/u/.cbth/ctx" {
		t.Errorf("defaults: %q %q", e.CBTHHome, e.CtxRoot)
	}
	e = DefaultEnv(func(k string) (string, bool) { return map[string]string{"CBTH_HOME": "/h", "CTX_ROOT": "/c"}[k], true }, "/home/u")
	if e.CBTHHome != "/h" || e.CtxRoot != "/c" {
		t.Errorf("overrides: %q %q", e.CBTHHome, e.CtxRoot)
	}
}

func TestModelLifecycle(t *testing.T) {
	env := testEnv(t)
	if !strings.HasSuffix(env.CtxRoot, "home/ctx") {
		t.Fatalf("CtxRoot %s", env.CtxRoot)
	}
	out, err := run(t, env, "ctx", "init", "--json")
	if err != nil || !strings.Contains(out, `"objects":1`) {
		t.Fatalf("init: %q %v", out, err)
	}
	_, err = run(t, env, "model", "add", "openai/gpt-4o", "--driver", "default=openai-chat", "--driver", "agent=openai-responses,openai-chat",
		"--id", "gpt-4o", "--default", "temperature=0.2", "--cap", "chat", "--cap", "stream", "--cap", "tool_call_syntax", "--session", "socket")
	if err != nil {
		t.Fatal(err)
	}
	drv, _ := os.ReadFile(filepath.Join(env.CtxRoot, "model/openai/gpt-4o.d/driver"))
	if string(drv) != "default=openai-chat\nagent=openai-responses,openai-chat\n" {
		t.Errorf("driver file %q", drv)
	}
	caps, _ := os.ReadFile(filepath.Join(env.CtxRoot, "model/openai/gpt-4o.d/cap"))
	if string(caps) != "chat\nstream\ntool_call_syntax\nsession\n" {
		t.Errorf("cap file %q", caps)
	}
	// Custom host: provider is the host name, base_url shown in default.
	if _, err := run(t, env, "model", "add", "gpt-5.4-mini", "--driver", "openai-chat", "--id", "gpt-5.4-mini", "--base-url", "https://api.lmm.best:9000/"); err != nil {
		t.Fatal(err)
	}
	def, _ := os.ReadFile(filepath.Join(env.CtxRoot, "model/api.lmm.best/gpt-5.4-mini.d/default"))
	if string(def) != "base_url=https://api.lmm.best:9000/\n" {
		t.Errorf("default file %q", def)
	}
	if _, err := run(t, env, "model", "alias", "coder", "openai/gpt-4o"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, env, "model", "alias", "main", "openai/gpt-4o", "--global"); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, env, "model", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []ModelInfo
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rows) != 3 || rows[0].Model != "api.lmm.best/gpt-5.4-mini" || rows[2].Model != "openai/gpt-4o" {
		t.Fatalf("rows %+v", rows)
	}
	if strings.Join(rows[2].Aliases, ",") != "home/1000/model/coder,model/main" || rows[2].Session != "socket" || rows[2].Meta.CreatedAt != "2026-01-02T03:04:05Z" {
		t.Errorf("gpt-4o row %+v", rows[2])
	}
	if l, _ := os.Readlink(filepath.Join(env.CtxRoot, "home/1000/model/coder")); l != filepath.Join(env.CtxRoot, "model/openai/gpt-4o") {
		t.Errorf("coder -> %q", l)
	}
	// Removing the model drops its user alias and sends main back to echo.
	if _, err := run(t, env, "model", "rm", "openai/gpt-4o"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(env.CtxRoot, "home/1000/model/coder")); !os.IsNotExist(err) {
		t.Errorf("alias survived: %v", err)
	}
	if l, _ := os.Readlink(filepath.Join(env.CtxRoot, "model/main")); l != filepath.Join(env.CtxRoot, "model/debug/echo") {
		t.Errorf("main -> %q", l)
	}
}

// No object is written whose #! line names a runner that is not there:
// the error says how to get one, and nothing of the tree exists after.
func TestNoObjectsWithoutARunner(t *testing.T) {
	for name, c := range map[string]struct {
		envRunner string
		args      []string
	}{
		"none found":       {"", []string{"ctx", "init"}},
		"--runner missing": {"", []string{"ctx", "init", "--runner", "/nonexistent/cortexfs-object-runner"}},
		"default missing":  {"/nonexistent/cortexfs-object-runner", []string{"ctx", "init"}},
		"model add":        {"", []string{"model", "add", "openai/gpt-4o", "--driver", "openai-chat", "--id", "gpt-4o"}},
	} {
		env := testEnv(t)
		env.Runner = c.envRunner
		_, err := run(t, env, c.args...)
		if errs.CodeOf(err) != errs.ENOENT || !strings.Contains(err.Error(), "cbth install --prefix /usr") || !strings.Contains(err.Error(), "--runner PATH") {
			t.Errorf("%s: %v; want ENOENT naming both fixes", name, err)
		}
		if _, err := os.Lstat(env.CtxRoot); !os.IsNotExist(err) {
			t.Errorf("%s: the tree was written anyway: %v", name, err)
		}
	}
	// A runner that is there is written into every shebang.
	env := testEnv(t)
	env.Runner = ""
	if _, err := run(t, env, "ctx", "init", "--runner", testEnv(t).Runner); err != nil {
		t.Fatal(err)
	}
}

// The runner is looked up beside the binary first, then on PATH.
func TestFindRunner(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "bin", "cbth")
	onPath := filepath.Join(dir, "path", "cortexfs-object-runner")
	for _, p := range []string{exe, onPath} {
		os.MkdirAll(filepath.Dir(p), 0o700)
		os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)
	}
	t.Setenv("PATH", filepath.Dir(onPath))
	if got := findRunner(exe); got != onPath {
		t.Errorf("with none beside the binary: %q, want %q from PATH", got, onPath)
	}
	beside := filepath.Join(dir, "bin", "cortexfs-object-runner")
	os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755)
	if got := findRunner(exe); got != beside {
		t.Errorf("with one beside the binary: %q, want %q", got, beside)
	}
	t.Setenv("PATH", t.TempDir())
	os.Remove(beside)
	if got := findRunner(exe); got != "" {
		t.Errorf("with none anywhere: %q", got)
	}
}

func TestModelErrors(t *testing.T) {
	env := testEnv(t)
	cases := []struct {
		args []string
		code errs.Code
	}{
		{[]string{"model", "add", "openai/gpt-4o", "--driver", "openai-chat", "--id", "x", "--default", "api_key=sk-123"}, errs.EINVAL},
		{[]string{"model", "add", "openai/gpt.sock", "--driver", "openai-chat", "--id", "x"}, errs.EINVAL},
		{[]string{"model", "add", "openai/x", "--driver", "bogus=openai-chat", "--id", "x"}, errs.EINVAL},
		{[]string{"model", "add", "openai/x", "--driver", "openai-chat", "--id", "x", "--cap", "openai_responses"}, errs.EINVAL},
		{[]string{"model", "add", "nohost", "--driver", "openai-chat", "--id", "x"}, errs.EINVAL},
		{[]string{"model", "alias", "coder", "openai/none"}, errs.ENOENT},
		{[]string{"model", "alias", "coder", "debug/echo", "--global"}, errs.EINVAL},
		{[]string{"model", "rm", "openai/none"}, errs.ENOENT},
		{[]string{"model", "rm", "debug/echo"}, errs.EINVAL},
	}
	for _, c := range cases {
		if _, err := run(t, env, c.args...); errs.CodeOf(err) != c.code {
			t.Errorf("%v: %v, want %s", c.args, err, c.code)
		}
	}
}

func TestInstall(t *testing.T) {
	env := testEnv(t)
	src := filepath.Join(t.TempDir(), "cbth-src")
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env.Executable = src
	prefix := t.TempDir()
	env.LookupEnv = pathEnv(filepath.Join(prefix, "bin"))
	res := installJSON(t, env, prefix)
	if res.Runner != filepath.Join(prefix, "bin/cortexfs-object-runner") {
		t.Errorf("runner %s", res.Runner)
	}
	st, err := os.Stat(filepath.Join(prefix, "bin/cbth"))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("binary: %v %v", st, err)
	}
	for _, n := range []string{"ctx", "cortexfs-object-runner"} {
		l, err := os.Readlink(filepath.Join(prefix, "bin", n))
		if err != nil || l != "cbth" {
			t.Errorf("%s -> %q %v", n, l, err)
		}
	}
	// No cbth-providers next to the source: installed without it, and
	// said so in the result and on stderr.
	stderr := env.Stderr.(*bytes.Buffer)
	if res.Providers != "" || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "cbth-providers not found") ||
		!strings.Contains(stderr.String(), "warning: cbth-providers not found next to "+src) {
		t.Errorf("missing helper: %+v, stderr %q", res, stderr)
	}
	// ... and how to get it: built next to the running binary.
	if build := "go build -o " + filepath.Join(filepath.Dir(src), "cbth-providers") + " ./cmd/cbth-providers"; !strings.Contains(stderr.String(), build) {
		t.Errorf("the warning does not say how to build the helper (%q): %q", build, stderr)
	}
	if _, err := os.Stat(filepath.Join(prefix, "bin/cbth-providers")); err == nil {
		t.Error("cbth-providers appeared from nowhere")
	}

	// With the helper next to the running binary (reached through a
	// symlink, as when run as ctx), it is copied beside cbth.
	helper := filepath.Join(filepath.Dir(src), "cbth-providers")
	if err := os.WriteFile(helper, []byte("#!/bin/sh\necho helper\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "ctx")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	env.Executable = link
	stderr.Reset()
	res = installJSON(t, env, prefix)
	dst := filepath.Join(prefix, "bin/cbth-providers")
	if res.Providers != dst || len(res.Warnings) != 0 || stderr.Len() != 0 {
		t.Errorf("with helper: %+v, stderr %q", res, stderr)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "#!/bin/sh\necho helper\n" {
		t.Errorf("installed helper: %q %v", b, err)
	}
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("helper mode: %v %v", st, err)
	}
	if len(res.SDKHelpers) != 0 {
		t.Errorf("SDK helpers appeared from nowhere: %v", res.SDKHelpers)
	}

	// The SDK helpers found next to it are copied too.
	gem := filepath.Join(filepath.Dir(src), provider.HelperGemini)
	if err := os.WriteFile(gem, []byte("#!/bin/sh\necho gemini\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res = installJSON(t, env, prefix)
	gdst := filepath.Join(prefix, "bin", provider.HelperGemini)
	if !slices.Equal(res.SDKHelpers, []string{gdst}) || res.Providers != dst {
		t.Errorf("with the gemini helper: %+v", res)
	}
	if b, err := os.ReadFile(gdst); err != nil || string(b) != "#!/bin/sh\necho gemini\n" {
		t.Errorf("installed gemini helper: %q %v", b, err)
	}
}

// installJSON runs install --json into prefix and returns its answer.
func installJSON(t *testing.T, env *Env, prefix string) InstallResult {
	t.Helper()
	out, err := run(t, env, "install", "--prefix", prefix, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res InstallResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// pathEnv is an environment whose PATH is dirs.
func pathEnv(dirs ...string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if k == "PATH" {
			return strings.Join(dirs, string(filepath.ListSeparator)), true
		}
		return "", false
	}
}

// PREFIX/bin not on PATH: installed all the same, with a warning (in the
// result and on stderr) that cbth and ctx will not be found by name, and
// how to fix it. The same directory reached through a symlink on PATH is
// on PATH.
func TestInstallWarnsWhenPrefixIsNotOnPath(t *testing.T) {
	env := testEnv(t)
	src := filepath.Join(t.TempDir(), "cbth")
	if err := os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(filepath.Dir(src), "cbth-providers"), []byte("#!/bin/sh\n"), 0o755)
	env.Executable = src
	prefix := t.TempDir()
	bin := filepath.Join(prefix, "bin")
	install := func() (InstallResult, string) {
		t.Helper()
		stderr := env.Stderr.(*bytes.Buffer)
		stderr.Reset()
		res := installJSON(t, env, prefix)
		return res, stderr.String()
	}
	for _, path := range [][]string{nil, {"/usr/bin", "/bin"}, {"", prefix}} {
		env.LookupEnv = pathEnv(path...)
		res, stderr := install()
		if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], bin+" is not on your PATH") ||
			!strings.Contains(res.Warnings[0], `export PATH="`+bin+`:$PATH"`) || !strings.Contains(stderr, "warning: "+bin+" is not on your PATH") {
			t.Errorf("PATH %q: warnings %q, stderr %q", path, res.Warnings, stderr)
		}
		if _, err := os.Stat(filepath.Join(bin, "cbth")); err != nil {
			t.Errorf("PATH %q: not installed: %v", path, err)
		}
	}
	link := filepath.Join(t.TempDir(), "bin")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range [][]string{{"/usr/bin", bin}, {link + "/"}} {
		env.LookupEnv = pathEnv(path...)
		if res, stderr := install(); len(res.Warnings) != 0 || stderr != "" {
			t.Errorf("PATH %q: warnings %q, stderr %q", path, res.Warnings, stderr)
		}
	}
}

// minimalELF is an ELF64 little-endian header with one program header:
// PT_INTERP naming interp, or PT_LOAD when interp is "".
func minimalELF(interp string) []byte {
	b := make([]byte, 64+56)
	copy(b, "\x7fELF\x02\x01\x01")
	le := binary.LittleEndian
	le.PutUint16(b[16:], 2)  // ET_EXEC
	le.PutUint32(b[20:], 1)  // e_version: EV_CURRENT
	le.PutUint64(b[32:], 64) // e_phoff
	le.PutUint16(b[54:], 56) // e_phentsize
	le.PutUint16(b[56:], 1)  // e_phnum
	ph := b[64:]
	if interp == "" {
		le.PutUint32(ph, 1) // PT_LOAD
		return b
	}
	le.PutUint32(ph, 3) // PT_INTERP
	le.PutUint64(ph[8:], uint64(len(b)))
	le.PutUint64(ph[32:], uint64(len(interp)+1))
	return append(append(b, interp...), 0)
}

// Installing a dynamically linked binary works, and says what it costs.
func TestInstallWarnsOfADynamicBinary(t *testing.T) {
	for _, c := range []struct {
		interp string
		warn   bool
	}{{"/lib64/ld-linux-x86-64.so.2", true}, {"", false}} {
		env := testEnv(t)
		src := filepath.Join(t.TempDir(), "cbth")
		if err := os.WriteFile(src, minimalELF(c.interp), 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(filepath.Dir(src), "cbth-providers"), []byte("#!/bin/sh\n"), 0o755)
		env.Executable = src
		prefix := t.TempDir()
		env.LookupEnv = pathEnv(filepath.Join(prefix, "bin"))
		res := installJSON(t, env, prefix)
		stderr := env.Stderr.(*bytes.Buffer).String()
		warned := len(res.Warnings) == 1 && strings.Contains(res.Warnings[0], "dynamically linked (interpreter "+c.interp+")") &&
			strings.Contains(res.Warnings[0], "CGO_ENABLED=0") && strings.Contains(stderr, "warning: ")
		if res.Dynamic != c.warn || warned != c.warn || (!c.warn && len(res.Warnings) != 0) {
			t.Errorf("interpreter %q: dynamic=%v warnings=%q stderr=%q", c.interp, res.Dynamic, res.Warnings, stderr)
		}
	}
}
