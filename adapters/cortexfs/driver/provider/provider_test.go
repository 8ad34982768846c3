package provider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/debug"
	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
)

func TestWireRoundTrip(t *testing.T) {
	req := driver.Request{Model: "openai/gpt-4o", Provider: "openai", NativeID: "gpt-4o",
		Messages: []driver.Message{{Role: "user", Content: "hi"}},
		Defaults: []object.KV{{Key: "temperature", Value: "0.2"}, {Key: "base_url", Value: "http://127.0.0.1:1/v1/"}},
		Caps:     []string{"chat", "stream"}}
	b, err := json.Marshal(Wire("openai-chat", req))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"driver":"openai-chat","model":"openai/gpt-4o","provider":"openai","native_id":"gpt-4o","base_url":"http://127.0.0.1:1/v1/","defaults":[{"key":"temperature","value":"0.2"},{"key":"base_url","value":"http://127.0.0.1:1/v1/"}],"capabilities":["chat","stream"],"messages":[{"role":"user","content":"hi"}]}`
	if string(b) != want {
		t.Fatalf("request line\n got %s\nwant %s", b, want)
	}
	var w WireRequest
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	back := w.Request()
	if u, _ := back.Default("base_url"); u != "http://127.0.0.1:1/v1/" || back.NativeID != "gpt-4o" || len(back.Caps) != 2 || back.Messages[0].Content != "hi" {
		t.Fatalf("round trip: %+v", back)
	}
	// base_url wins over a base_url default.
	w.BaseURL = "http://127.0.0.1:2/"
	if u, _ := w.Request().Default("base_url"); u != "http://127.0.0.1:2/" {
		t.Fatalf("base_url override: %s", u)
	}
}

// blocking is a driver that emits one delta and waits for cancellation.
type blocking struct{}

func (blocking) Stream(ctx context.Context, _ driver.Request, out stream.Sink) error {
	if err := out.Emit(stream.Delta("x")); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

type failing struct{ err error }

func (f failing) Stream(context.Context, driver.Request, stream.Sink) error { return f.err }

type lifecycle struct{}

func (lifecycle) Stream(_ context.Context, _ driver.Request, out stream.Sink) error {
	return out.Emit(stream.Event{Type: stream.TypeDone, Status: "ok"})
}

func TestServe(t *testing.T) {
	set := driver.Set{debug.Name: debug.Echo{},
		"denied": failing{errs.New(errs.EACCES, "x: permission denied")},
		"bad":    lifecycle{}}
	msg := `,"messages":[{"role":"user","content":"hello there"}]}`
	cases := []struct {
		name, in string
		exit     int
		out      string
	}{
		{"debug", `{"v":1,"driver":"debug"` + msg + "\n", 0,
			`{"type":"delta","text":"hello there"}
{"type":"message","role":"assistant","content":[{"type":"text","text":"hello there"}]}
{"type":"usage","input_tokens":2,"output_tokens":2}
{"type":"done","status":"ok"}
`},
		{"no newline, unknown field", `{"v":1,"driver":"debug","later":true` + msg, 0, ""},
		{"error", `{"v":1,"driver":"denied"` + msg, 13,
			`{"type":"error","code":"EACCES","message":"x: permission denied"}
{"type":"done","status":"error"}
`},
		{"unknown driver", `{"v":1,"driver":"nope"` + msg, 69,
			`{"type":"error","code":"ENOTCONF","message":"driver \"nope\" is not in this cbth-providers build"}
{"type":"done","status":"error"}
`},
		{"version", `{"v":2,"driver":"debug"` + msg, 69, ""},
		{"not json", "hello\n", 2, ""},
		{"empty", "", 2, `{"type":"error","code":"EINVAL","message":"no request line on stdin"}
{"type":"done","status":"error"}
`},
		{"no user message", `{"v":1,"driver":"debug","messages":[]}`, 2, ""},
		{"driver breaks framing", `{"v":1,"driver":"bad"` + msg, 70, ""},
	}
	for _, c := range cases {
		var out bytes.Buffer
		exit := Serve(context.Background(), strings.NewReader(c.in), &out, set)
		if exit != c.exit {
			t.Errorf("%s: exit %d, want %d\n%s", c.name, exit, c.exit, out.String())
		}
		if c.out != "" && out.String() != c.out {
			t.Errorf("%s:\n got %s\nwant %s", c.name, out.String(), c.out)
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if last := lines[len(lines)-1]; !strings.HasPrefix(last, `{"type":"done"`) {
			t.Errorf("%s: last line %s", c.name, last)
		}
	}
	// Cancelled mid-call: done cancelled, exit 1.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := bufioPipe()
	done := make(chan int, 1)
	go func() {
		done <- Serve(ctx, strings.NewReader(`{"v":1,"driver":"block"`+msg), pw, driver.Set{"block": blocking{}})
		pw.Close()
	}()
	if l, _ := pr.ReadString('\n'); l != `{"type":"delta","text":"x"}`+"\n" {
		t.Fatalf("got %q", l)
	}
	cancel()
	if l, _ := pr.ReadString('\n'); l != `{"type":"done","status":"cancelled"}`+"\n" {
		t.Fatalf("got %q", l)
	}
	if exit := <-done; exit != 1 {
		t.Fatalf("cancelled exit %d", exit)
	}
}

func bufioPipe() (*bufio.Reader, *os.File) {
	r, w, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	return bufio.NewReader(r), w
}

func TestReadEvents(t *testing.T) {
	cases := []struct {
		name, in string
		emitted  int
		done     bool
		status   string
		code     errs.Code // of the returned protocol error, or of res.err
	}{
		{"ok", "{\"type\":\"delta\",\"text\":\"a\"}\n{\"type\":\"done\",\"status\":\"ok\"}\n", 1, true, "ok", ""},
		{"error", "{\"type\":\"error\",\"code\":\"EAGAIN\",\"message\":\"m\"}\n{\"type\":\"done\",\"status\":\"error\"}\n", 0, true, "error", errs.EAGAIN},
		{"error without code", "{\"type\":\"error\",\"message\":\"m\"}\n{\"type\":\"done\",\"status\":\"error\"}\n", 0, true, "error", errs.EINTERNAL},
		{"done error without error", "{\"type\":\"done\",\"status\":\"error\"}\n", 0, true, "error", errs.EINTERNAL},
		{"eof", "{\"type\":\"delta\",\"text\":\"a\"}\n", 1, false, "", ""},
		{"start", "{\"type\":\"start\"}\n", 0, false, "", errs.EINTERNAL},
		{"garbage", "nope\n", 0, false, "", errs.EINTERNAL},
		{"bad status", "{\"type\":\"done\",\"status\":\"maybe\"}\n", 0, false, "", errs.EINTERNAL},
		{"body after error", "{\"type\":\"error\",\"code\":\"EAGAIN\"}\n{\"type\":\"delta\"}\n", 0, false, "", errs.EINTERNAL},
	}
	for _, c := range cases {
		n := 0
		res, err := readEvents(bufio.NewReader(strings.NewReader(c.in)), stream.SinkFunc(func(e stream.Event) error {
			if e.Run != "" {
				t.Errorf("%s: run id passed through", c.name)
			}
			n++
			return nil
		}))
		code := errs.CodeOf(err)
		if err == nil {
			code = errs.CodeOf(res.err)
		}
		if n != c.emitted || res.done != c.done || res.status != c.status || code != c.code {
			t.Errorf("%s: emitted %d done %v status %q code %q (err %v, res.err %v)", c.name, n, res.done, res.status, code, err, res.err)
		}
	}
	// A sink that fails (stdout gone) stops the read with its error.
	gone := errors.New("gone")
	_, err := readEvents(bufio.NewReader(strings.NewReader("{\"type\":\"delta\"}\n")), stream.SinkFunc(func(stream.Event) error { return gone }))
	if !errors.Is(err, gone) {
		t.Fatalf("sink error: %v", err)
	}
}

func TestLocate(t *testing.T) {
	dir := t.TempDir()
	exe := func(p string) string {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	realCbth := exe(filepath.Join(dir, "real", "cbth"))
	link := filepath.Join(dir, "links", "cortexfs-object-runner")
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink(realCbth, link); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	pathHelper := ""
	l := Locator{
		LookupEnv:  func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Executable: func() (string, error) { return link, nil },
		LookPath: func(string) (string, error) {
			if pathHelper == "" {
				return "", os.ErrNotExist
			}
			return pathHelper, nil
		},
	}
	if _, err := l.Locate(); errs.CodeOf(err) != errs.ENOTCONF || !strings.Contains(err.Error(), filepath.Join(dir, "real")) {
		t.Fatalf("nothing installed: %v", err)
	}
	pathHelper = "/somewhere/cbth-providers"
	if p, err := l.Locate(); err != nil || p != pathHelper {
		t.Fatalf("PATH: %s %v", p, err)
	}
	// Next to the executable, symlinks resolved, beats PATH. A helper next
	// to the symlink does not count.
	exe(filepath.Join(dir, "links", HelperName))
	next := exe(filepath.Join(dir, "real", HelperName))
	if p, err := l.Locate(); err != nil || p != next {
		t.Fatalf("next to cbth: %s %v", p, err)
	}
	// $CBTH_PROVIDERS beats both, and must be executable.
	env[EnvHelper] = exe(filepath.Join(dir, "elsewhere", "helper"))
	if p, err := l.Locate(); err != nil || p != env[EnvHelper] {
		t.Fatalf("env: %s %v", p, err)
	}
	os.Chmod(env[EnvHelper], 0o644)
	if _, err := l.Locate(); errs.CodeOf(err) != errs.ENOTCONF {
		t.Fatalf("env not executable: %v", err)
	}
	delete(env, EnvHelper)
	// A call goes to its SDK's helper where that is installed, and to the
	// helper of every driver where it is not.
	if p, err := l.LocateFor("gemini"); err != nil || p != next {
		t.Fatalf("gemini without its helper: %s %v", p, err)
	}
	gem := exe(filepath.Join(dir, "real", HelperGemini))
	if p, err := l.LocateFor("gemini"); err != nil || p != gem {
		t.Fatalf("gemini with its helper: %s %v", p, err)
	}
	if p, err := l.LocateFor("openai-chat"); err != nil || p != next {
		t.Fatalf("openai-chat beside the gemini helper only: %s %v", p, err)
	}
	if p, err := l.Locate(); err != nil || p != next {
		t.Fatalf("the helper of every driver: %s %v", p, err)
	}
	env[EnvHelper] = exe(filepath.Join(dir, "elsewhere", "helper2"))
	if p, err := l.LocateFor("gemini"); err != nil || p != env[EnvHelper] {
		t.Fatalf("env beats the SDK helper: %s %v", p, err)
	}
}

// Every network driver has exactly one SDK helper.
func TestSDKHelpersCoverTheDrivers(t *testing.T) {
	n := 0
	for _, ds := range SDKHelpers {
		n += len(ds)
	}
	for _, d := range Names {
		if HelperFor(d) == "" {
			t.Errorf("driver %s has no SDK helper", d)
		}
	}
	if n != len(Names) || HelperFor("debug") != "" {
		t.Errorf("SDK helpers carry %d drivers, want the %d network drivers %v", n, len(Names), Names)
	}
}

func TestRemoteCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Remote{Driver: "openai-chat", Locator: Locator{LookupEnv: func(string) (string, bool) { return "", false }}}.
		Stream(ctx, driver.Request{}, stream.SinkFunc(func(stream.Event) error { return nil }))
	if !driver.Canceled(ctx, err) {
		t.Fatalf("got %v", err)
	}
}

func TestDriversSet(t *testing.T) {
	s := Drivers(nil)
	if _, ok := s[debug.Name].(debug.Echo); !ok {
		t.Fatal("debug must run in-process")
	}
	for _, n := range Names {
		if r, ok := s[n].(Remote); !ok || r.Driver != n {
			t.Fatalf("%s: %#v", n, s[n])
		}
	}
}
