// Package service installs cbth's daemon as an opt-in per-user service:
// a systemd user unit on Linux, a launchd agent on macOS. A Codex Desktop
// heartbeat cannot start the daemon (its sandbox refuses the start-up lock
// and the socket), so Desktop users keep one running this way; nothing is
// installed system-wide. The service manager is only ever reached through
// Manager.Run, so tests point it at a recorder instead of the real one.
package service

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Manager is one user's service manager and where its definitions live.
type Manager struct {
	// Kind is "systemd-user" or "launchd".
	Kind string
	// Dir is where the unit or agent file goes: $XDG_CONFIG_HOME/systemd/user
	// or ~/Library/LaunchAgents.
	Dir string
	// Ctl is the systemctl or launchctl to run.
	Ctl string
	// UID is the user's id (launchd's gui/<uid> domain).
	UID int
	// Run runs Ctl with args and returns its combined output.
	Run func(ctl string, args ...string) ([]byte, error)
}

// Spec is what the service runs: cbth's executable for one home.
type Spec struct {
	Exe  string // absolute path of cbth
	Home string // absolute $CBTH_HOME
	// DefaultHome is ~/.cbth: its service has the plain name.
	DefaultHome string
}

// Args is the daemon's command line.
func (s Spec) Args() []string {
	return []string{s.Exe, "--home", s.Home, "daemon", "run", "--quiet", "--supervised"}
}

// Name is the unit name (without .service) or the agent's label suffix:
// "cbth" for the default home, "cbth-<hash>" for any other, so two homes
// get two services.
func (s Spec) Name() string {
	if filepath.Clean(s.Home) == filepath.Clean(s.DefaultHome) {
		return "cbth"
	}
	h := sha256.Sum256([]byte(filepath.Clean(s.Home)))
	return "cbth-" + hex.EncodeToString(h[:4])
}

// Status is what `cbth service status` reports.
type Status struct {
	Manager   string   `json:"manager"`
	Name      string   `json:"name"`
	Path      string   `json:"path"`
	Installed bool     `json:"installed"`
	UpToDate  bool     `json:"up_to_date"`
	Command   []string `json:"command"`
	// Active is the manager's word for the service (systemd: is-active's
	// answer; launchd: "loaded" or "not_loaded"); ManagerError is set when
	// the manager could not be asked.
	Active       string `json:"active"`
	ManagerError string `json:"manager_error,omitempty"`
}

func (m Manager) file(s Spec) (path string, content []byte) {
	switch m.Kind {
	case "launchd":
		return filepath.Join(m.Dir, launchdLabel(s)+".plist"), launchdPlist(s)
	default:
		return filepath.Join(m.Dir, s.Name()+".service"), systemdUnit(s)
	}
}

// Check refuses what cannot go into a unit or an agent file as it is:
// a relative path, or a control character in a path (a newline in a
// systemd unit would start a directive of its own, and XML has no
// escape for most control characters); and an executable another user
// could rewrite, which the service would run at every login.
func (s Spec) Check() error {
	if !filepath.IsAbs(s.Home) {
		return errs.New(errs.EINVAL, "the service needs absolute paths (home %q)", s.Home)
	}
	if !utf8.ValidString(s.Home) || strings.ContainsFunc(s.Home, unicode.IsControl) {
		return errs.New(errs.EINVAL, "the service's home %q holds a control character or is not UTF-8: it cannot be written into a service definition", s.Home)
	}
	return home.CheckProgram("the cbth executable", s.Exe)
}

// Install writes the definition and asks the manager to load and start it.
func (m Manager) Install(s Spec) (Status, error) {
	if err := s.Check(); err != nil {
		return Status{}, err
	}
	path, content := m.file(s)
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		return Status{}, errs.Wrap(errs.EACCES, err, "create %s", m.Dir)
	}
	if err := writeFile(path, content); err != nil {
		return Status{}, err
	}
	for _, args := range m.installArgs(s, path) {
		if out, err := m.Run(m.Ctl, args...); err != nil {
			return m.Query(s), errs.Wrap(errs.EHOSTDOWN, err, "%s %s: %s", m.Ctl, strings.Join(args, " "), strings.TrimSpace(string(out)))
		}
	}
	return m.Query(s), nil
}

// Uninstall stops and unloads the service and removes its definition.
// Stopping a service that is not loaded is not an error.
func (m Manager) Uninstall(s Spec) (Status, error) {
	path, _ := m.file(s)
	for _, args := range m.uninstallArgs(s) {
		_, _ = m.Run(m.Ctl, args...)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Status{}, errs.Wrap(errs.EACCES, err, "remove %s", path)
	}
	if m.Kind != "launchd" {
		if out, err := m.Run(m.Ctl, "--user", "daemon-reload"); err != nil {
			return m.Query(s), errs.Wrap(errs.EHOSTDOWN, err, "%s --user daemon-reload: %s", m.Ctl, strings.TrimSpace(string(out)))
		}
	}
	return m.Query(s), nil
}

// Query reports the definition on disk and what the manager says.
func (m Manager) Query(s Spec) Status {
	path, want := m.file(s)
	st := Status{Manager: m.Kind, Name: s.Name(), Path: path, Command: s.Args(), Active: "unknown"}
	if m.Kind == "launchd" {
		st.Name = launchdLabel(s)
	}
	if have, err := os.ReadFile(path); err == nil {
		st.Installed, st.UpToDate = true, bytes.Equal(have, want)
	}
	out, err := m.Run(m.Ctl, m.statusArgs(s)...)
	word := strings.TrimSpace(string(out))
	switch {
	case m.Kind == "launchd" && err == nil:
		st.Active = "loaded"
	case m.Kind == "launchd":
		st.Active = "not_loaded"
	case word != "" && !strings.Contains(word, "\n"):
		// systemctl is-active prints one word, and exits non-zero for
		// any state but active.
		st.Active = word
	case err != nil:
		st.ManagerError = strings.TrimSpace(err.Error() + " " + word)
	}
	return st
}

func (m Manager) installArgs(s Spec, path string) [][]string {
	if m.Kind == "launchd" {
		return [][]string{{"bootstrap", launchdDomain(m.UID), path}}
	}
	return [][]string{{"--user", "daemon-reload"}, {"--user", "enable", "--now", s.Name() + ".service"}}
}

func (m Manager) uninstallArgs(s Spec) [][]string {
	if m.Kind == "launchd" {
		return [][]string{{"bootout", launchdDomain(m.UID) + "/" + launchdLabel(s)}}
	}
	return [][]string{{"--user", "disable", "--now", s.Name() + ".service"}}
}

func (m Manager) statusArgs(s Spec) []string {
	if m.Kind == "launchd" {
		return []string{"print", launchdDomain(m.UID) + "/" + launchdLabel(s)}
	}
	return []string{"--user", "is-active", s.Name() + ".service"}
}

// writeFile replaces path with data through a temp file, 0600: the
// definition names the user's home and binary, nobody else's business.
func writeFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return errs.Wrap(errs.EACCES, err, "write %s", path)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return errs.Wrap(errs.EACCES, err, "write %s", path)
	}
	return nil
}
