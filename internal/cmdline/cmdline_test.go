package cmdline

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The full differential tests against kong live in cmd/cbth, next to the
// real command tree; these pin the pieces whose rules are easy to get
// subtly wrong, on a toy tree.

type toyGlobals struct {
	JSON bool   `name:"json" help:"JSON."`
	Home string `placeholder:"DIR"`
}

type toy struct {
	toyGlobals
	Get   toyGet   `cmd:"" help:"Get a thing."`
	Group toyGroup `cmd:""`
}

type toyGet struct {
	Key    string        `arg:"" enum:"a,b" help:"Which."`
	Wait   time.Duration `default:"10s"`
	IDs    []string      `name:"id"`
	Raw    []string      `sep:"none"`
	N      int           `short:"n" default:"3"`
	Follow bool          `short:"f"`
	Out    string        `type:"path" default:"/tmp"`
	For    time.Duration `xor:"until" required:""`
	Until  time.Time     `xor:"until" required:""`
}

func (toyGet) Run() error { return nil }

type toyGroup struct {
	Leaf struct{} `cmd:""`
}

func parse(t *testing.T, line ...string) (*toy, *Result, error) {
	t.Helper()
	var c toy
	res, err := App{Name: "toy"}.Parse(&c, line)
	return &c, res, err
}

func TestParse(t *testing.T) {
	c, res, err := parse(t, "--json", "get", "b", "--for", "1m", "--id", "x,y", "--id=z", "--raw", "p,q", "-fn5", "--home=/h")
	if err != nil {
		t.Fatal(err)
	}
	want := toyGet{Key: "b", Wait: 10 * time.Second, IDs: []string{"x", "y", "z"}, Raw: []string{"p,q"}, N: 5, Follow: true, Out: "/tmp", For: time.Minute}
	if res.Node.Path() != "get" || !reflect.DeepEqual(c.Get, want) || !c.JSON || c.Home != "/h" {
		t.Errorf("%s: %+v %+v", res.Node.Path(), c.Get, c.toyGlobals)
	}
	for _, line := range [][]string{
		{"get", "c", "--for", "1m"}, // enum
		{"get", "a"},                // xor group missing
		{"get", "a", "--for", "1m", "--until", "2026-01-01T00:00:00Z"}, // both
		{"get", "--for", "1m"},                 // argument missing
		{"get", "a", "--for", "-1m"},           // a value that looks like a flag
		{"--for", "1m", "get", "a"},            // a command's flag before its name
		{"group"},                              // a group without Run needs a subcommand
		{"get", "a", "--for", "1m", "--bogus"}, // unknown
		{"get", "a", "--for", "1m", "-x"},
		{"get", "a", "--for"},
	} {
		if _, _, err := parse(t, line...); !errors.As(err, new(*Error)) {
			t.Errorf("%q: %v, want a usage error", line, err)
		}
	}
	for _, line := range [][]string{{"--help"}, {"get", "-h", "c"}, {"group", "--help=false"}} {
		if _, res, err := parse(t, line...); err != nil || !res.Help {
			t.Errorf("%q: %v %+v, want help", line, err, res)
		}
	}
	if _, _, err := parse(t, "get", "-h", "--bogus"); err == nil {
		t.Error("a line that does not parse must not give help")
	}
}

func TestKebab(t *testing.T) {
	for in, want := range map[string]string{
		"ThreadID": "thread-id", "JSONL": "jsonl", "BaseURL": "base-url", "N": "n",
		"ContextLength": "context-length", "GL11Version": "gl-11-version", "PDFLoader": "pdf-loader",
		"CloseHead": "close-head", "X": "x",
	} {
		if got := kebab(in); got != want {
			t.Errorf("kebab(%q) = %q, want %q", in, got, want)
		}
	}
}

// The ASCII shortcut must name fields exactly as the general rule does.
func FuzzKebabASCII(f *testing.F) {
	for _, s := range []string{"ThreadID", "JSONL", "aMy", "A_b", "GL11Version", "PDFLoader", "My", "ABc", "x9Y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fast, ok := kebabASCII(s)
		if !ok {
			return
		}
		if slow := kebabRunes(s); fast != slow {
			t.Fatalf("kebab(%q): ascii %q, general %q", s, fast, slow)
		}
	})
}

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		in   string
		sep  rune
		want []string
	}{
		{"a,b", ',', []string{"a", "b"}},
		{"", ',', nil},
		{",", ',', []string{""}},
		{"a,", ',', []string{"a"}},
		{",a", ',', []string{"", "a"}},
		{`a\,b`, ',', []string{"a,b"}},
		{`a\b`, ',', []string{`a\b`}},
		{`a\`, ',', []string{`a\`}},
		{"a,b", -1, []string{"a,b"}},
		{"", -1, []string{""}},
		{"a\xffb", ',', []string{"a\uFFFDb"}},
	} {
		if got := split(c.in, c.sep); !reflect.DeepEqual(got, c.want) {
			t.Errorf("split(%q, %q) = %q, want %q", c.in, c.sep, got, c.want)
		}
	}
}

func TestValidUTF8(t *testing.T) {
	if got := validUTF8("a\xff\xfeb\xed\xa0\x80"); got != "a\uFFFD\uFFFDb\uFFFD\uFFFD\uFFFD" {
		t.Errorf("%q", got)
	}
}

func TestExpandPath(t *testing.T) {
	t.Setenv("HOME", "/home/u")
	wd, _ := filepath.Abs(".")
	for in, want := range map[string]string{
		"/a/b": "/a/b", "~/x/../y": "/home/u/y", "~": filepath.Join(wd, "~"), "r": filepath.Join(wd, "r"), "": wd,
	} {
		if got := ExpandPath(in); got != want {
			t.Errorf("ExpandPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHelp(t *testing.T) {
	_, res, err := parse(t, "get", "--help")
	if err != nil || !res.Help {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := res.Node.WriteHelp(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Usage: toy get --for=DURATION --until=TIME <key> [flags]",
		"<key>", "one of: a, b",
		"-h, --help", "--home=DIR", "--wait=DURATION", "default: 10s",
		"-n, --n=INT", "--id=STRING,...", "--raw=STRING\n", "--out=PATH",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, b.String())
		}
	}
	root, err := App{Name: "toy", Help: "A toy."}.Tree(&toy{})
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := root.WriteHelp(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Usage: toy <command> [flags]", "A toy.", "  get --for=DURATION", "  group leaf", `Run "toy <command> --help"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("root help lacks %q:\n%s", want, b.String())
		}
	}
	if u := root.Usage(); !strings.Contains(u, `Run "toy --help"`) {
		t.Errorf("usage %q", u)
	}
}

type badType struct {
	X map[string]string
}

func TestUnsupportedField(t *testing.T) {
	if _, err := (App{}).Parse(&badType{}, nil); err == nil || errors.As(err, new(*Error)) {
		t.Errorf("an unsupported field must be an internal error, got %v", err)
	}
}

type hiddenTag struct {
	X string `hidden:""`
}

type dupFlag struct {
	toyGlobals
	Sub struct {
		Home string
	} `cmd:""`
}

func TestCheck(t *testing.T) {
	if err := (App{}).Check(&toy{}); err != nil {
		t.Errorf("toy: %v", err)
	}
	if err := (App{}).Check(&hiddenTag{}); err == nil {
		t.Error("an unread tag passed the check")
	}
	if err := (App{}).Check(&dupFlag{}); err == nil {
		t.Error("a flag declared twice on a path passed the check")
	}
}

// A line reflects over the commands it names and no others.
func TestParseBuildsOnlyThePath(t *testing.T) {
	_, res, err := parse(t, "get", "a", "--for", "1s")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res.Node.Parent.subs {
		if (s.built != nil) != (s.name == "get") {
			t.Errorf("%s built: %v", s.name, s.built != nil)
		}
	}
}
