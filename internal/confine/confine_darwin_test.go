package confine

import (
	"strings"
	"testing"
)

// The generated profile denies by default, lets the RW directories be
// written and nothing else but the null devices, and quotes paths.
func TestProfile(t *testing.T) {
	p := profile(Policy{RW: []string{`/Users/u/pro"j`}, Scoped: true})
	for _, w := range []string{"(deny default)", `(allow file-write* (subpath "/Users/u/pro\"j"))`, "(allow signal (target self))"} {
		if !strings.Contains(p, w) {
			t.Errorf("profile lacks %s:\n%s", w, p)
		}
	}
	if strings.Count(p, "file-write*") != 2 {
		t.Errorf("writes allowed beyond the root and the devices:\n%s", p)
	}
	// No unix socket, as on Linux; the helper's bus directory alone when
	// named, after the deny (the later rule wins).
	if !strings.Contains(p, `(deny network-outbound (remote unix-socket (subpath "/")))`) || strings.Contains(p, "(allow network-outbound (remote unix-socket") {
		t.Errorf("unix sockets are not denied:\n%s", p)
	}
	h := profile(Policy{Unix: []string{"/run/user/501"}})
	if d, a := strings.Index(h, "(deny network-outbound"), strings.Index(h, `(allow network-outbound (remote unix-socket (subpath "/run/user/501")))`); d < 0 || a < d {
		t.Errorf("the helper's socket directory is not allowed after the deny:\n%s", h)
	}
}
