package name

import (
	"net/url"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/engine/errs"
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
		{"https://user:secret@example.com/", "", true}, // no credentials in object files
	}
	for _, c := range cases {
		got, err := ProviderFromBaseURL(c.in)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("ProviderFromBaseURL(%q) = %q, %v; want %q, err=%v", c.in, got, err, c.want, c.wantErr)
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

// viaNetURL is ProviderFromBaseURL as it was written on net/url, kept as
// the reference for the hand-written parser.
func viaNetURL(raw string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if host == "" || Valid(host) != nil {
		return "", false
	}
	return host, true
}

// refusedOnPurpose names the inputs net/url accepts and ProviderFromBaseURL
// refuses by design: user information, %-escapes in the host, and control
// bytes in the fragment (net/url checks for them only before the '#').
func refusedOnPurpose(raw string) bool {
	_, rest, ok := strings.Cut(strings.TrimSpace(raw), "://")
	if !ok {
		return false
	}
	if _, frag, ok := strings.Cut(rest, "#"); ok && strings.IndexFunc(frag, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
		return true
	}
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	return strings.ContainsAny(rest, "@%")
}

// Whatever ProviderFromBaseURL accepts, net/url accepts with the same
// host; what it refuses, net/url refuses too unless refusedOnPurpose.
func FuzzProviderFromBaseURL(f *testing.F) {
	for _, s := range []string{"https://api.lmm.best:9000/", "http://LOCALHOST:8080", "https://Example.COM.", "https://a@b/",
		"https://h/%zz", "https://h/?q=%zz", "https://h/#%zz", "https://h/a b", "HTTPS://h", "https://h:", "https://h:8x",
		"https://[::1]:80/", "https://a%2db/", "https:h", "https:///p", " https://h ", "https://h\x7f/", "https://h/\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := ProviderFromBaseURL(raw)
		want, ok := viaNetURL(raw)
		switch {
		case err == nil && (!ok || got != want):
			t.Fatalf("%q: accepted as %q; net/url: %q, %v", raw, got, want, ok)
		case err != nil && ok && !refusedOnPurpose(raw):
			t.Fatalf("%q: refused (%v); net/url accepts it as %q", raw, err, want)
		case err != nil && errs.CodeOf(err) != errs.EINVAL:
			t.Fatalf("%q: %v, want EINVAL", raw, err)
		}
	})
}
