package artifact

import "testing"

// The recorded content type depends on the file name and its first bytes
// only, never on the host's mime tables.
func TestContentType(t *testing.T) {
	for _, tc := range []struct {
		name string
		head string
		want string
	}{
		{"result.json", "", "application/json"},
		{"RESULT.JSON", "", "application/json"},
		{"report.md", "# hi", "text/markdown; charset=utf-8"},
		{"ci.log", "ok", "text/plain; charset=utf-8"},
		{"fix.patch", "--- a", "text/x-diff; charset=utf-8"},
		{"shot.png", "\x89PNG", "image/png"},
		{"out", `{"ok":true}`, "application/json"},
		{"out", "[1,2]", "application/json"},
		{"out", "plain words", "text/plain; charset=utf-8"},
		{"out", "", "application/octet-stream"},
		{"out.bin", "\x00\x01", "application/octet-stream"},
		{"out.weird", "\xff\xfe", "application/octet-stream"},
	} {
		if got := contentType(tc.name, []byte(tc.head)); got != tc.want {
			t.Errorf("contentType(%q, %q) = %q, want %q", tc.name, tc.head, got, tc.want)
		}
	}
}
