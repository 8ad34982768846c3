package sessions_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/codex/sessions"
	"github.com/cbth-dev/cbth/internal/errs"
)

// layout builds a Codex home's control directory as Codex makes it: the
// socket path a symlink into an owner-only directory holding the socket.
// Each case then spoils one step; the check must refuse exactly it.
func layout(t *testing.T) (codexHome, link, target string) {
	t.Helper()
	base := t.TempDir()
	codexHome = filepath.Join(base, "codex-home")
	ctl := filepath.Join(codexHome, "app-server-control")
	sockDir := filepath.Join(base, "codex-daemon-uid")
	for _, d := range []string{ctl, sockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	target = filepath.Join(sockDir, "s")
	l, err := net.Listen("unix", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Chmod(target, 0o600); err != nil {
		t.Fatal(err)
	}
	link = sessions.DaemonSocket(codexHome)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	return codexHome, link, target
}

// The Codex daemon's socket has no authentication of its own: each step
// from the Codex home to the socket must be this user's and writable by
// it alone, or the daemon is not used (EACCES); a missing one means no
// daemon runs (EHOSTDOWN). The uid is a parameter, so the rule for a
// socket of another user is checked without root.
func TestCheckDaemonSocket(t *testing.T) {
	me := os.Getuid()
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, home, link, target string)
		uid   int
		code  errs.Code
		says  string
	}{
		{name: "as Codex makes it", uid: me},
		{name: "another user's", uid: me + 1, code: errs.EACCES, says: "belongs to uid"},
		{name: "a group-writable control directory", uid: me, code: errs.EACCES, says: "app-server-control",
			spoil: func(t *testing.T, home, _, _ string) { chmod(t, filepath.Join(home, "app-server-control"), 0o770) }},
		{name: "a socket directory open to others", uid: me, code: errs.EACCES, says: "codex-daemon-uid",
			spoil: func(t *testing.T, _, _, target string) { chmod(t, filepath.Dir(target), 0o755) }},
		{name: "a socket open to others", uid: me, code: errs.EACCES, says: "open to others",
			spoil: func(t *testing.T, _, _, target string) { chmod(t, target, 0o666) }},
		{name: "a link that leads to a world-writable directory", uid: me, code: errs.EACCES, says: "refused",
			spoil: func(t *testing.T, _, link, _ string) {
				elsewhere := filepath.Join(t.TempDir(), "pub")
				if err := os.Mkdir(elsewhere, 0o777); err != nil {
					t.Fatal(err)
				}
				chmod(t, elsewhere, 0o777)
				relink(t, link, filepath.Join(elsewhere, "s"))
			}},
		{name: "a link to a regular file", uid: me, code: errs.EACCES, says: "not a socket",
			spoil: func(t *testing.T, _, link, target string) {
				f := filepath.Join(filepath.Dir(target), "file")
				if err := os.WriteFile(f, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				relink(t, link, f)
			}},
		{name: "a link to a socket that is gone", uid: me, code: errs.EHOSTDOWN, says: "gone",
			spoil: func(t *testing.T, _, _, target string) { os.Remove(target) }},
		{name: "no socket", uid: me, code: errs.EHOSTDOWN, says: "does not run",
			spoil: func(t *testing.T, _, link, _ string) { os.Remove(link) }},
		{name: "no control directory", uid: me, code: errs.EHOSTDOWN, says: "does not run",
			spoil: func(t *testing.T, home, _, _ string) { os.RemoveAll(filepath.Join(home, "app-server-control")) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			home, link, target := layout(t)
			if c.spoil != nil {
				c.spoil(t, home, link, target)
			}
			got, err := sessions.CheckDaemonSocket(link, c.uid)
			if errs.CodeOf(err) != c.code || (err != nil && !strings.Contains(err.Error(), c.says)) {
				t.Fatalf("check: %v (%s), want %s saying %q", err, errs.CodeOf(err), c.code, c.says)
			}
			if c.code == "" && got != target {
				t.Fatalf("the socket is %s, want %s", got, target)
			}
		})
	}
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

func relink(t *testing.T, link, to string) {
	t.Helper()
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(to, link); err != nil {
		t.Fatal(err)
	}
}
