package mcpconfig

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/cbth-dev/cbth/internal/errs"
)

var update = flag.Bool("update", false, "rewrite testdata/*.out.toml")

var entry = Entry{Command: "/opt/cbth/bin/cbth", Home: `/home/u/.cbth "q"`, Approve: ApprovalTools}

// Install into each testdata/NAME.in.toml gives testdata/NAME.out.toml;
// installing again changes nothing; uninstall gives back the input
// (for an input with a block of cbth's, the input without it).
func TestInstallGolden(t *testing.T) {
	ins, _ := filepath.Glob("testdata/*.in.toml")
	if len(ins) == 0 {
		t.Fatal("no testdata")
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.toml")
		t.Run(name, func(t *testing.T) {
			orig, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "config.toml")
			os.WriteFile(path, orig, 0o600)
			changed, err := Install(path, entry)
			if err != nil || !changed {
				t.Fatalf("install: changed %v, %v", changed, err)
			}
			got, _ := os.ReadFile(path)
			golden := filepath.Join("testdata", name+".out.toml")
			if *update {
				os.WriteFile(golden, got, 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if string(got) != string(want) {
				t.Fatalf("install gave:\n%s\nwant:\n%s", got, want)
			}
			var doc struct {
				MCPServers map[string]struct {
					Command string            `toml:"command"`
					Env     map[string]string `toml:"env"`
				} `toml:"mcp_servers"`
			}
			if err := toml.Unmarshal(got, &doc); err != nil || doc.MCPServers["cbth"].Command != entry.Command || doc.MCPServers["cbth"].Env["CBTH_HOME"] != entry.Home {
				t.Fatalf("the result does not read back: %v %+v", err, doc)
			}
			if changed, err := Install(path, entry); err != nil || changed {
				t.Fatalf("a second install: changed %v, %v", changed, err)
			}
			if st := Inspect(path, entry); len(st.Approved) != len(ApprovalTools) || !st.Installed {
				t.Fatalf("inspect: %+v", st)
			}
			if changed, err := Uninstall(path); err != nil || !changed {
				t.Fatalf("uninstall: changed %v, %v", changed, err)
			}
			back, _ := os.ReadFile(path)
			rest, _, _ := cut(orig)
			if len(rest) > 0 && !strings.HasSuffix(string(rest), "\n") {
				rest = append(rest, '\n') // the one change install makes to the user's text
			}
			if string(back) != string(rest) {
				t.Fatalf("uninstall gave:\n%q\nwant:\n%q", back, rest)
			}
		})
	}
}

// Install creates a missing file 0600 in a 0700 directory.
func TestInstallNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "codex", "config.toml")
	if _, err := Install(path, entry); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	di, _ := os.Stat(filepath.Dir(path))
	if err != nil || fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Fatalf("modes %v %v (%v)", fi.Mode(), di.Mode(), err)
	}
}

// Files cbth must not touch: each refused with a code, left byte for byte.
func TestInstallRefusals(t *testing.T) {
	for _, c := range []struct {
		name, text string
		code       errs.Code
	}{
		{"the user's own cbth server", "[mcp_servers.cbth]\ncommand = \"mine\"\n", errs.EEXIST},
		{"a dotted cbth server", "mcp_servers.cbth.command = \"mine\"\n", errs.EEXIST},
		{"a block that never ends", "# >>> cbth mcp: written by `cbth mcp install`, removed by `cbth mcp uninstall` >>>\n[x]\n", errs.EINVAL},
		{"a file that does not parse", "model = \n", errs.EINVAL},
		{"a table the block would repeat", "[mcp_servers.cbth.tools.task_run]\napproval_mode = \"prompt\"\n", errs.EEXIST},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.toml")
			os.WriteFile(path, []byte(c.text), 0o600)
			_, err := Install(path, entry)
			var ce *errs.Error
			if !errors.As(err, &ce) || ce.Code != c.code {
				t.Fatalf("install: %v, want %s", err, c.code)
			}
			if b, _ := os.ReadFile(path); string(b) != c.text {
				t.Fatalf("the file changed:\n%s", b)
			}
		})
	}
}

// Each -c override is one valid TOML key = value, as Codex parses it.
func TestOverridesParse(t *testing.T) {
	o := entry.Overrides()
	if len(o) != 2*(3+len(entry.Approve)) {
		t.Fatalf("overrides %q", o)
	}
	for i := 0; i < len(o); i += 2 {
		if o[i] != "-c" {
			t.Fatalf("overrides %q", o)
		}
		var v map[string]any
		if err := toml.Unmarshal([]byte(o[i+1]), &v); err != nil {
			t.Errorf("%q does not parse: %v", o[i+1], err)
		}
	}
}

// Marker text that is not a whole comment line of the document (inside
// a multi-line string, after a value) is the user's text: install adds
// its own block and leaves that text byte for byte; uninstall removes
// only the block.
func TestMarkersCountOnlyAsCommentLines(t *testing.T) {
	user := "notes = '''\n" + beginMarker + "\nkeep me\n" + endMarker + "\n'''\nmodel = \"o3\" " + beginMarker + "\n"
	path := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(path, []byte(user), 0o600)
	if _, err := Install(path, entry); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(got), user) || !strings.HasSuffix(string(got), endMarker+"\n") {
		t.Fatalf("install cut the user's text:\n%s", got)
	}
	var doc struct {
		Notes string `toml:"notes"`
	}
	if err := toml.Unmarshal(got, &doc); err != nil || !strings.Contains(doc.Notes, "keep me") {
		t.Fatalf("the user's string: %q %v", doc.Notes, err)
	}
	if changed, err := Uninstall(path); err != nil || !changed {
		t.Fatalf("uninstall: %v %v", changed, err)
	}
	if back, _ := os.ReadFile(path); string(back) != user {
		t.Fatalf("uninstall gave:\n%q\nwant:\n%q", back, user)
	}
}

// A config.toml that is a symbolic link is written through: the target
// changes, the link stays a link. A dangling link is refused, and left.
func TestInstallWritesThroughASymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "dotfiles", "codex.toml")
	os.MkdirAll(filepath.Dir(target), 0o700)
	os.WriteFile(target, []byte("model = \"o3\"\n"), 0o600)
	link := filepath.Join(dir, "codex", "config.toml")
	os.MkdirAll(filepath.Dir(link), 0o700)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(link, entry); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(target); !strings.Contains(string(b), "[mcp_servers.cbth]") || !strings.HasPrefix(string(b), "model = \"o3\"\n") {
		t.Fatalf("the target:\n%s", b)
	}
	dangling := filepath.Join(dir, "other", "config.toml")
	os.MkdirAll(filepath.Dir(dangling), 0o700)
	os.Symlink(filepath.Join(dir, "nowhere.toml"), dangling)
	if _, err := Install(dangling, entry); errs.CodeOf(err) != errs.EINVAL {
		t.Fatalf("a dangling link: %v, want EINVAL", err)
	}
	if fi, err := os.Lstat(dangling); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatal("the dangling link was replaced")
	}
}
