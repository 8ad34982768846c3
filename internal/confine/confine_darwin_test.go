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
}
