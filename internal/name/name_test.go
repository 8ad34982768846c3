package name

import (
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

func TestValid(t *testing.T) {
	good := []string{
		"a", "Z", "0", "gpt-4o", "claude-sonnet-4", "gemini-2.5-pro", "fs.read",
		"api.lmm.best", "a+b", "a_b", "echo", "x.sockets", "x.dd", "a.d1",
		strings.Repeat("a", 64),
	}
	bad := []string{
		"", ".", "..", "/", "a/b", "a\x00b", "-a", ".a", "_a", "+a",
		"a\nb", "a\tb", "a\x7fb", "a b", "héllo", "x.sock", "x.d", "echo.d",
		"a.sock", strings.Repeat("a", 65), "a:b", "a*b", "a\\b",
	}
	for _, s := range good {
		if err := Valid(s); err != nil {
			t.Errorf("Valid(%q) = %v, want ok", s, err)
		}
	}
	for _, s := range bad {
		err := Valid(s)
		if err == nil {
			t.Errorf("Valid(%q) = ok, want EINVAL", s)
			continue
		}
		if errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("Valid(%q) code = %s, want EINVAL", s, errs.CodeOf(err))
		}
	}
}

func TestParseModel(t *testing.T) {
	cases := []struct {
		in      string
		want    ModelID
		wantErr bool
	}{
		{"openai/gpt-4o", ModelID{"openai", "gpt-4o"}, false},
		{"debug/echo", ModelID{"debug", "echo"}, false},
		{"api.lmm.best/gpt-5.4-mini", ModelID{"api.lmm.best", "gpt-5.4-mini"}, false},
		{"openai", ModelID{}, true},
		{"openai/", ModelID{}, true},
		{"/gpt", ModelID{}, true},
		{"a/b/c", ModelID{}, true},
		{"openai/gpt.sock", ModelID{}, true},
		{"../x", ModelID{}, true},
	}
	for _, c := range cases {
		got, err := ParseModel(c.in)
		if (err != nil) != c.wantErr {
			t.Errorf("ParseModel(%q) err = %v, wantErr %v", c.in, err, c.wantErr)
			continue
		}
		if got != c.want {
			t.Errorf("ParseModel(%q) = %v, want %v", c.in, got, c.want)
		}
		if err == nil && got.String() != c.in {
			t.Errorf("String() = %q, want %q", got.String(), c.in)
		}
	}
}

func TestProviderFromBaseURL(t *testing.T) {
	cases := []struct {
		in, want string
		wantErr  bool
	}{
		{"https://api.lmm.best:9000/", "api.lmm.best", false},
		{"https://api.lmm.best/v1", "api.lmm.best", false},
		{"http://LOCALHOST:8080", "localhost", false},
		{"https://Example.COM.", "example.com", false},
		{"ftp://example.com", "", true},
		{"not a url", "", true},
		{"https://", "", true},
		{"https://[::1]:80/", "", true},
		{"HTTPS://h", "h", false},
		{"https://h:8x", "", true},
		{"https://h/%zz", "", true},
		{"https://h/\x00", "", true},
		{"https://a%2db/", "", true},
		// No credentials in object files, and none echoed in an error.
		{"https://user:secret@example.com/", "", true},
		{"https://secret@example.com/", "", true},
		{"https://user:secret@example.com/%zz", "", true},
	}
	for _, c := range cases {
		got, err := ProviderFromBaseURL(c.in)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("ProviderFromBaseURL(%q) = %q, %v; want %q, err=%v", c.in, got, err, c.want, c.wantErr)
		}
		if err != nil && (errs.CodeOf(err) != errs.EINVAL || strings.Contains(err.Error(), "secret")) {
			t.Errorf("ProviderFromBaseURL(%q): %v; want EINVAL without the secret", c.in, err)
		}
	}
}

// FuzzName checks the validator against an independent statement of the
// rule, and that anything it accepts is a single safe path component.
func FuzzName(f *testing.F) {
	for _, s := range []string{"a", "gpt-4o", ".", "..", "x.sock", "x.d", "a/b", "a\x00", "\n", strings.Repeat("z", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := Valid(s)
		if (err == nil) != reference(s) {
			t.Fatalf("Valid(%q) = %v, reference says %v", s, err, reference(s))
		}
		if err == nil && (strings.ContainsAny(s, "/\x00\n") || s == "." || s == "..") {
			t.Fatalf("accepted unsafe %q", s)
		}
	})
}

// reference restates the rule with a different construction: a character
// class check per position, then the suffix ban.
func reference(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	for i, r := range []byte(s) {
		allowed := alnum
		if i > 0 {
			allowed += "._+-"
		}
		if !strings.ContainsRune(allowed, rune(r)) {
			return false
		}
	}
	return !strings.HasSuffix(s, ".sock") && !strings.HasSuffix(s, ".d")
}
