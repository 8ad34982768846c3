package object

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

func TestRoutesParseAndResolve(t *testing.T) {
	cases := []struct {
		in      string
		use     string
		want    []string
		wantErr bool
	}{
		{"debug\n", RouteExec, []string{"debug"}, false},
		{"default=openai-chat\nexec=openai-chat\nsocket=openai-chat\nagent=openai-responses,openai-chat\n", RouteAgent, []string{"openai-responses", "openai-chat"}, false},
		{"default=openai-chat\nagent=openai-responses\n", RouteExec, []string{"openai-chat"}, false},
		{"default=openai-chat\nagent=openai-responses\n", RouteAgent, []string{"openai-responses", "openai-chat"}, false},
		{"exec=gemini\n", RouteSocket, nil, false},
		{"", "", nil, true},
		{"bogus=openai-chat\n", "", nil, true},
		{"default=\n", "", nil, true},
		{"default=a,,b\n", "", nil, true},
		{"default=Open AI\n", "", nil, true},
		{"default=a\ndefault=b\n", "", nil, true},
		{"debug\nopenai-chat\n", "", nil, true},
	}
	for _, c := range cases {
		r, err := ParseRoutes(c.in)
		if (err != nil) != c.wantErr {
			t.Errorf("ParseRoutes(%q) err = %v, wantErr %v", c.in, err, c.wantErr)
			continue
		}
		if err != nil {
			if errs.CodeOf(err) != errs.EINVAL {
				t.Errorf("ParseRoutes(%q) code %s", c.in, errs.CodeOf(err))
			}
			continue
		}
		if got := r.Resolve(c.use); !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseRoutes(%q).Resolve(%s) = %v, want %v", c.in, c.use, got, c.want)
		}
		back, err := ParseRoutes(r.String())
		if err != nil || !reflect.DeepEqual(back, r) {
			t.Errorf("round trip of %q: %v %v", c.in, back, err)
		}
	}
	if got := (Routes{RouteDefault: {"debug"}}).String(); got != "debug\n" {
		t.Errorf("legacy render = %q", got)
	}
}

func TestCaps(t *testing.T) {
	if _, err := ParseCaps("chat\nstream\ntool_call_syntax\n"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"openai_responses", "anthropic_messages", "gemini_generate_content", "native_thread", "native_stateful", "native_stateless", "telepathy", "chat\nchat"} {
		if _, err := ParseCaps(bad); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("ParseCaps(%q) = %v, want EINVAL", bad, err)
		}
	}
	for _, c := range StableCaps() {
		if err := ValidateCaps([]string{c}); err != nil {
			t.Errorf("stable cap %s refused: %v", c, err)
		}
	}
}

func TestDefaults(t *testing.T) {
	kvs, err := ParseDefaults("temperature=0.2\nbase_url=https://api.lmm.best:9000/\n\nmax_tokens=100\napi_key_env=LMM_API_KEY\ntemperature=0.3\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []KV{{"temperature", "0.3"}, {"base_url", "https://api.lmm.best:9000/"}, {"max_tokens", "100"}, {"api_key_env", "LMM_API_KEY"}}
	if !reflect.DeepEqual(kvs, want) {
		t.Fatalf("got %v", kvs)
	}
	if v, ok := Lookup(kvs, "base_url"); !ok || v != "https://api.lmm.best:9000/" {
		t.Errorf("Lookup base_url = %q %v", v, ok)
	}
	for _, bad := range []string{"novalue", "=x", "api_key=sk-123", "TOKEN=abc", "client_secret=x", "password=x", "9x=1", "a b=1"} {
		if _, err := ParseDefaults(bad); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("ParseDefaults(%q) = %v, want EINVAL", bad, err)
		}
	}
}

func TestMetaRoundTrip(t *testing.T) {
	m := Meta{ID: "openai/gpt-4o", Name: "gpt-4o", Description: "GPT-4o", Type: "model", CreatedAt: "2024-05-13T00:00:00Z", OwnedBy: "openai", ContextLength: 128000}
	b, err := RenderMeta("/usr/bin/cortexfs-object-runner", m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "#!/usr/bin/cortexfs-object-runner\nid=openai/gpt-4o\n") {
		t.Fatalf("bad header:\n%s", b)
	}
	runner, back, err := ParseMeta(b)
	if err != nil || runner != "/usr/bin/cortexfs-object-runner" || back != m {
		t.Fatalf("round trip: %q %+v %v", runner, back, err)
	}
	if _, err := RenderMeta("relative/runner", m); err == nil {
		t.Error("relative runner accepted")
	}
	m.Description = "two\nlines"
	if _, err := RenderMeta("/r", m); err == nil {
		t.Error("multi-line value accepted")
	}
	if _, _, err := ParseMeta([]byte("id=x\ntype=model\n")); err == nil {
		t.Error("file without shebang accepted")
	}
}

func TestObjectValidateAndFiles(t *testing.T) {
	o := DebugEcho()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	meta, _ := RenderMeta("/r", o.Meta)
	back, err := FromFiles(o.Kind, o.Path, meta, Controls(o))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, o) {
		t.Fatalf("round trip:\n%+v\n%+v", back, o)
	}
	bad := []func(*Object){
		func(o *Object) { o.Path = "echo" },
		func(o *Object) { o.Path = "debug/echo.sock" },
		func(o *Object) { o.Kind = "widget" },
		func(o *Object) { o.Session = "native" },
		func(o *Object) { o.Caps = []string{"native_stateful"} },
		func(o *Object) { o.Driver = nil },
		func(o *Object) { o.Defaults = []KV{{"api_key", "x"}} },
		func(o *Object) { o.NativeID = "a\nb" },
	}
	for i, f := range bad {
		c := DebugEcho()
		f(&c)
		if err := c.Validate(); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("case %d: Validate = %v, want EINVAL", i, err)
		}
	}
}
