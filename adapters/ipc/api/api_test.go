package api_test

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Operations of the tests' own: a request and reply of this package,
// one of them attaching.
var (
	echo   = api.Op[api.JobArgs, api.Outcome]{Name: "test.echo"}
	attach = api.Op[api.Empty, api.Outcome]{Name: "test.attach", Attach: true}
	quiet  = api.Op[api.Empty, api.Outcome]{Name: "test.quiet", Passive: true, Versionless: true}
)

// Handle decodes an operation's arguments into its request type: none
// gives the zero request, malformed ones are EINVAL naming the
// operation and never reach the handler; the handler's error keeps its
// code. The operation's Passive and Versionless reach the handler entry.
func TestHandle(t *testing.T) {
	tab := api.Table{}
	var got []api.JobArgs
	api.Handle(tab, echo, func(_ context.Context, a api.JobArgs) (api.Outcome, error) {
		got = append(got, a)
		if a.JobID == "missing" {
			return api.Outcome{}, errs.New(errs.ENOENT, "no job %s", a.JobID)
		}
		return api.Outcome{Outcome: "ok"}, nil
	})
	api.Handle(tab, quiet, func(context.Context, api.Empty) (api.Outcome, error) { return api.Outcome{}, nil })
	h := tab[echo.Name]
	for _, c := range []struct {
		name string
		args string
		code errs.Code
		seen int
	}{
		{"no arguments", "", "", 1},
		{"arguments", `{"job_id":"j1","as_of_seq":7}`, "", 2},
		{"malformed", `{"job_id":`, errs.EINVAL, 2},
		{"the wrong type", `{"job_id":5}`, errs.EINVAL, 2},
		{"the handler's error", `{"job_id":"missing"}`, errs.ENOENT, 3},
	} {
		_, err := h.Serve(context.Background(), json.RawMessage(c.args))
		if errs.CodeOf(err) != c.code || len(got) != c.seen {
			t.Errorf("%s: %v (handler called %d times), want %q and %d calls", c.name, err, len(got), c.code, c.seen)
		}
		if c.code == errs.EINVAL && !strings.Contains(err.Error(), echo.Name) {
			t.Errorf("%s: %v does not name the operation", c.name, err)
		}
	}
	if got[0] != (api.JobArgs{}) || got[1].JobID != "j1" || got[1].AsOfSeq != 7 {
		t.Errorf("decoded %+v", got)
	}
	if h.Passive || h.Versionless || !tab[quiet.Name].Passive || !tab[quiet.Name].Versionless {
		t.Errorf("flags: %+v, %+v", h, tab[quiet.Name])
	}
}

// An operation called on a real socket: the request and reply travel as
// their types, an error keeps its code, and an attaching operation makes
// the connection an attached client for as long as it is open.
func TestCallOverTheSocket(t *testing.T) {
	tab := api.Table{}
	api.Handle(tab, echo, func(_ context.Context, a api.JobArgs) (api.Outcome, error) {
		if a.JobID == "" {
			return api.Outcome{}, errs.New(errs.EINVAL, "no job")
		}
		return api.Outcome{Outcome: engine.Outcome("seen " + a.JobID)}, nil
	})
	api.Handle(tab, attach, func(context.Context, api.Empty) (api.Outcome, error) { return api.Outcome{}, nil })
	dir, err := os.MkdirTemp("", "api")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	ln, err := ipc.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &ipc.Server{Version: "test", Log: slog.New(slog.DiscardHandler), UID: os.Getuid(),
		Handler: func(ctx context.Context, r *ipc.Request) (any, error) {
			h, ok := tab[r.Op]
			if !ok {
				return nil, errs.New(errs.EINVAL, "unknown operation %q", r.Op)
			}
			return h.Serve(ctx, r.Args)
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	c, err := ipc.Dial(path, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if rep, err := echo.Call(c, api.JobArgs{JobID: "j1"}); err != nil || rep.Outcome != "seen j1" {
		t.Fatalf("echo: %+v, %v", rep, err)
	}
	if _, err := echo.Call(c, api.JobArgs{}); errs.CodeOf(err) != errs.EINVAL {
		t.Fatalf("an error's code: %v", err)
	}
	if srv.Attached() != 0 {
		t.Fatalf("%d attached before any attaching call", srv.Attached())
	}
	if _, err := attach.Call(c, api.Empty{}); err != nil {
		t.Fatal(err)
	}
	if srv.Attached() != 1 {
		t.Fatalf("%d attached after an attaching call, want 1", srv.Attached())
	}
	c.Close()
	for deadline := time.Now().Add(10 * time.Second); srv.Attached() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the closed connection still counts as attached")
		}
	}
}

// opDecl is an operation declared in this package's source.
type opDecl struct{ name, file string }

// declaredOps parses the package's files for every Op[...]{Name: ...}.
func declaredOps(t *testing.T) []opDecl {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []opDecl
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			ix, ok := cl.Type.(*ast.IndexListExpr)
			if id, isID := ixX(ix, ok); !isID || id != "Op" {
				return true
			}
			for _, el := range cl.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if k, isID := kv.Key.(*ast.Ident); ok && isID && k.Name == "Name" {
					if lit, ok := kv.Value.(*ast.BasicLit); ok {
						name, _ := strconv.Unquote(lit.Value)
						out = append(out, opDecl{name, f})
					}
				}
			}
			return true
		})
	}
	return out
}

func ixX(ix *ast.IndexListExpr, ok bool) (string, bool) {
	if !ok {
		return "", false
	}
	id, isID := ix.X.(*ast.Ident)
	if !isID {
		return "", false
	}
	return id.Name, true
}

// api.All names every operation declared here, once each, so the test
// that the daemon serves every operation (adapters/daemon) sees a new
// one; operation names are lower-case words joined by dots or
// underscores, as the CLI and the logs print them.
func TestAllNamesEveryDeclaredOperation(t *testing.T) {
	decl := declaredOps(t)
	if len(decl) < 50 {
		t.Fatalf("found %d operations in the source: the parse no longer finds them", len(decl))
	}
	valid := regexp.MustCompile(`^[a-z]+([._][a-z]+)*$`)
	seen := map[string]string{}
	for _, d := range decl {
		if other, dup := seen[d.name]; dup {
			t.Errorf("operation %s declared twice (%s, %s)", d.name, other, d.file)
		}
		seen[d.name] = d.file
		if !slices.Contains(api.All, d.name) {
			t.Errorf("operation %s (%s) is not in api.All", d.name, d.file)
		}
		if !valid.MatchString(d.name) {
			t.Errorf("operation name %q is not lower-case words", d.name)
		}
	}
	for i, n := range api.All {
		if _, ok := seen[n]; !ok {
			t.Errorf("api.All names %s, which is not declared", n)
		}
		if slices.Contains(api.All[:i], n) {
			t.Errorf("api.All names %s twice", n)
		}
	}
}

// An MCP call must say which thread made it; what it appends is the
// agent's, correlated by that thread, and its record names the tool.
func TestMCPCaller(t *testing.T) {
	for _, c := range []struct {
		thread string
		code   errs.Code
	}{{"T1", ""}, {"", errs.ThreadUnidentified}, {"  \t", errs.ThreadUnidentified}} {
		if err := (api.MCPCaller{ThreadID: c.thread}).Check(); errs.CodeOf(err) != c.code {
			t.Errorf("caller %q: %v, want %q", c.thread, err, c.code)
		}
	}
	c := api.MCPCaller{ThreadID: "T1", TurnID: "turn-9", SandboxMode: "read-only"}
	if m := c.Meta(); m.Actor != "agent" || m.CorrelationID != "mcp:T1" {
		t.Errorf("meta %+v", m)
	}
	if r := c.Record("job_submit"); r.Tool != "job_submit" || r.TurnID != "turn-9" || r.SandboxMode != "read-only" {
		t.Errorf("record %+v", r)
	}
}
