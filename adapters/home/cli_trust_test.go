package home

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// [cli] trust is written into the user's config.toml keeping every other
// byte, or not at all: a trust the file already names otherwise, a [cli]
// header inside a string, a [cli] table made by dotted keys are refused.
func TestSetHomeTrust(t *testing.T) {
	const own = events.TrustOwnPermissions
	for _, c := range []struct {
		name, before, after string
		changed             bool
		code                errs.Code
	}{
		{name: "no file", before: "\x00", after: "\n[cli]\ntrust = \"own_permissions\"\n", changed: true},
		{name: "no [cli]", before: "idle_timeout = \"10m\"\n", after: "idle_timeout = \"10m\"\n\n[cli]\ntrust = \"own_permissions\"\n", changed: true},
		{name: "a [cli] table with a comment", before: "# mine\n[cli] # the CLI\nsteer = false\n[mcp]\n",
			after: "# mine\n[cli] # the CLI\ntrust = \"own_permissions\"\nsteer = false\n[mcp]\n", changed: true},
		{name: "already so", before: "[cli]\ntrust = \"own_permissions\"\n", after: "[cli]\ntrust = \"own_permissions\"\n"},
		{name: "another trust", before: "[cli]\ntrust = \"strict\"\n", code: errs.EEXIST},
		{name: "[cli] inside a string", before: "park_hook = [\"\"\"\n[cli]\n\"\"\"]\n", code: errs.EINVAL},
		{name: "a dotted [cli]", before: "cli.steer = true\n", code: errs.EINVAL},
		{name: "not TOML", before: "[cli\n", code: errs.EINVAL},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.toml")
			if c.before != "\x00" {
				if err := os.WriteFile(p, []byte(c.before), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			changed, err := SetHomeTrust(p, own)
			if errs.CodeOf(err) != c.code || changed != c.changed {
				t.Fatalf("changed %v, %v (%s); want %v, %s", changed, err, errs.CodeOf(err), c.changed, c.code)
			}
			b, _ := os.ReadFile(p)
			want := c.after
			if c.code != "" {
				want = strings.TrimPrefix(c.before, "\x00")
			}
			if string(b) != want {
				t.Fatalf("the file is now %q, want %q", b, want)
			}
		})
	}
	if _, err := SetHomeTrust(filepath.Join(t.TempDir(), "c.toml"), "all"); errs.CodeOf(err) != errs.EINVAL {
		t.Fatalf("an unknown trust: %v", err)
	}
}
