package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The per-user service, with the service manager replaced by a recorder:
// these tests never touch the real user's systemd or launchd. (This
// machine has no systemd user session and no macOS; what the real
// managers do with the files is not exercised here.)

type ctl struct {
	path, log, active string
}

// fakeCtl is a systemctl (or launchctl) that records each call and keeps
// one service's state in a file: enable --now starts it, disable --now
// stops it, is-active reports it the way systemctl does.
func fakeCtl(t *testing.T) ctl {
	t.Helper()
	dir := t.TempDir()
	c := ctl{path: filepath.Join(dir, "ctl"), log: filepath.Join(dir, "calls"), active: filepath.Join(dir, "active")}
	script := `#!/bin/sh
echo "$*" >> ` + c.log + `
case "$*" in
*"enable --now"*) touch ` + c.active + ` ;;
*"disable --now"*) rm -f ` + c.active + ` ;;
*is-active*) if [ -e ` + c.active + ` ]; then echo active; else echo inactive; exit 3; fi ;;
esac
`
	if err := os.WriteFile(c.path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c ctl) calls(t *testing.T) []string {
	b, _ := os.ReadFile(c.log)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

type serviceReply struct {
	Outcome   string   `json:"outcome"`
	Manager   string   `json:"manager"`
	Name      string   `json:"name"`
	Path      string   `json:"path"`
	Installed bool     `json:"installed"`
	UpToDate  bool     `json:"up_to_date"`
	Command   []string `json:"command"`
	Active    string   `json:"active"`
}

func TestService_InstallStatusUninstall(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	cfg := t.TempDir()
	c := fakeCtl(t)
	h.env = append(h.env, "XDG_CONFIG_HOME="+cfg, "CBTH_SERVICE_CTL="+c.path)
	var r serviceReply
	h.ok(&r, "service", "install")
	unit := filepath.Join(cfg, "systemd", "user", r.Name+".service")
	if r.Manager != "systemd-user" || r.Path != unit || !r.Installed || !r.UpToDate || r.Active != "active" || !strings.HasPrefix(r.Name, "cbth-") {
		t.Fatalf("install: %+v", r)
	}
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	want := `ExecStart="` + cbthBin + `" "--home" "` + h.root + `" "daemon" "run" "--quiet" "--supervised"`
	if !strings.Contains(string(b), want) || !strings.Contains(string(b), "WantedBy=default.target") {
		t.Fatalf("unit file:\n%s\nwant the line %s", b, want)
	}
	if fi, _ := os.Stat(unit); fi.Mode().Perm() != 0o600 {
		t.Fatalf("unit file mode %v", fi.Mode())
	}
	if got := strings.Join(c.calls(t), "|"); got != "--user daemon-reload|--user enable --now "+r.Name+".service|--user is-active "+r.Name+".service" {
		t.Fatalf("systemctl calls: %s", got)
	}
	h.ok(&r, "service", "status")
	if !r.Installed || !r.UpToDate || r.Active != "active" {
		t.Fatalf("status: %+v", r)
	}
	// A unit written for another binary is reported as not current.
	os.WriteFile(unit, []byte(strings.Replace(string(b), cbthBin, "/elsewhere/cbth", 1)), 0o600)
	h.ok(&r, "service", "status")
	if !r.Installed || r.UpToDate {
		t.Fatalf("status of a stale unit: %+v", r)
	}
	h.ok(&r, "service", "uninstall")
	if r.Installed || r.Active != "inactive" {
		t.Fatalf("uninstall: %+v", r)
	}
	if _, err := os.Stat(unit); !os.IsNotExist(err) {
		t.Fatalf("unit left behind: %v", err)
	}
	calls := c.calls(t)
	if !strings.Contains(strings.Join(calls, "|"), "--user disable --now "+r.Name+".service|--user daemon-reload") {
		t.Fatalf("systemctl calls: %v", calls)
	}

	// The default home's service has the plain name.
	plain := newHome(t)
	plain.env = []string{"HOME=" + filepath.Dir(h.root), "XDG_CONFIG_HOME=" + cfg, "CBTH_SERVICE_CTL=" + c.path}
	plain.ok(&r, "service", "status")
	if r.Name != "cbth" || r.Installed {
		t.Fatalf("default home's service: %+v", r)
	}
}

// What the unit runs: a supervised daemon does not leave on idle.
func TestService_SupervisedDaemonStaysUp(t *testing.T) {
	t.Parallel()
	h := newHome(t, "CBTH_IDLE_TIMEOUT=300ms")
	cmd := h.cmd("daemon", "run", "--quiet", "--supervised")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	waitFor(t, "the daemon to serve", 10*time.Second, func() bool { return h.pid() != 0 })
	select {
	case err := <-exited:
		t.Fatalf("the supervised daemon left on idle: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	var st struct {
		Outcome string `json:"outcome"`
	}
	r := h.run("daemon", "stop", "--json")
	json.Unmarshal([]byte(r.stdout), &st)
	if st.Outcome != "stopped" {
		t.Fatalf("stop: %s %s", r.stdout, r.stderr)
	}
	<-exited
}

// A path written into the unit cannot carry a directive of its own: a
// home with a newline (here one that would add ExecStartPre=) is
// refused before anything is written or run, and what systemd would
// expand in a path (specifiers, variables, quotes, backslashes) is
// escaped by its rules.
func TestService_PathsCannotInjectDirectives(t *testing.T) {
	t.Parallel()
	cfg := t.TempDir()
	c := fakeCtl(t)
	base := t.TempDir()
	evil := filepath.Join(base, "h\nExecStartPre=/bin/sh -c 'touch "+filepath.Join(base, "pwned")+"'")
	h := &homeDir{t: t, root: evil, env: []string{"CBTH_HOME=" + evil, "HOME=" + t.TempDir(), "XDG_CONFIG_HOME=" + cfg, "CBTH_SERVICE_CTL=" + c.path}}
	for _, ch := range []string{"\n", "\r", "\t", "\x1b"} {
		h.root = filepath.Join(base, "h"+ch+"x")
		h.env[0] = "CBTH_HOME=" + h.root
		h.fails(time.Minute, "service", "install").want(t, "EINVAL", 2, "control character")
	}
	h.root, h.env[0] = evil, "CBTH_HOME="+evil
	h.fails(time.Minute, "service", "install").want(t, "EINVAL", 2, "control character")
	units, _ := filepath.Glob(filepath.Join(cfg, "systemd", "user", "*"))
	if _, err := os.Stat(c.log); len(units) != 0 || !os.IsNotExist(err) {
		t.Fatalf("a refused install wrote %v and ran %q", units, c.calls(t))
	}

	// Characters systemd reads, escaped: the unit's ExecStart gives back
	// the command line word for word.
	odd := filepath.Join(base, `50% $HOME "q" \b\`)
	h = &homeDir{t: t, root: odd, env: []string{"CBTH_HOME=" + odd, "HOME=" + t.TempDir(), "XDG_CONFIG_HOME=" + cfg, "CBTH_SERVICE_CTL=" + c.path}}
	var r serviceReply
	h.ok(&r, "service", "install")
	b, err := os.ReadFile(r.Path)
	if err != nil {
		t.Fatal(err)
	}
	want := `"--home" "` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "$", "$$").Replace(odd) + `" "daemon"`
	desc := `Description=cbth daemon for "` + strings.ReplaceAll(odd, "%", "%%") + `"` + "\n"
	if !strings.Contains(string(b), want) || !strings.Contains(string(b), desc) || strings.Count(string(b), "\n") != 13 {
		t.Fatalf("unit:\n%s\nwant %s and %s", b, want, desc)
	}
	h.ok(nil, "service", "uninstall")
}
