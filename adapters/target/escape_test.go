package target

import (
	"net/url"
	"testing"
)

// escapeSegment must name thread files exactly as url.PathEscape did, or
// threads delivered to before the change would get a second file.
func FuzzEscapeSegmentMatchesPathEscape(f *testing.F) {
	for _, s := range []string{"", "thread-0001", "a b", "a/b", "a;b,c?d", "$&+:=@~-_.", "é", "\x00\xff", "%41", "ü/../x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := escapeSegment(s), url.PathEscape(s); got != want {
			t.Fatalf("escapeSegment(%q) = %q, url.PathEscape %q", s, got, want)
		}
	})
}
