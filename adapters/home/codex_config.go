package home

import (
	"path/filepath"
	"strings"

	"github.com/cbth-dev/cbth/engine/errs"
)

// checkCodex refuses Codex settings that could only fail later, and
// writes "~/" paths out in full. codex_binary is a name looked up in PATH
// or an absolute path; codex_home an absolute path. Whether they exist is
// checked when the daemon first starts the app-server (ENOTCONF then).
func checkCodex(c *Config, getenv func(string) string) error {
	if b := c.CodexBinary; b != "" {
		p, err := expandHome(b, getenv)
		if err != nil {
			return errs.Wrap(errs.EINVAL, err, "codex_binary")
		}
		if strings.ContainsRune(p, '/') && !filepath.IsAbs(p) {
			return errs.New(errs.EINVAL, "codex_binary %q is relative: give a name looked up in PATH or an absolute path", b)
		}
		c.CodexBinary = p
	}
	if h := c.CodexHome; h != "" {
		p, err := expandHome(h, getenv)
		if err != nil {
			return errs.Wrap(errs.EINVAL, err, "codex_home")
		}
		if !filepath.IsAbs(p) {
			return errs.New(errs.EINVAL, "codex_home %q is not an absolute path", h)
		}
		c.CodexHome = filepath.Clean(p)
	}
	return nil
}

func expandHome(p string, getenv func(string) string) (string, error) {
	if !strings.HasPrefix(p, "~/") {
		return p, nil
	}
	h := getenv("HOME")
	if h == "" {
		return "", errs.New(errs.EINVAL, "%q starts with ~/ but HOME is not set", p)
	}
	return filepath.Join(h, p[2:]), nil
}

// CodexHomeDir is the CODEX_HOME the shared app-server and the foreground
// Codex run with: codex_home when set, else the CODEX_HOME of the daemon's
// environment, else ~/.codex, the user's own Codex home, where their
// login, their config and the threads they may bind live.
func (c Config) CodexHomeDir(getenv func(string) string) (string, error) {
	if c.CodexHome != "" {
		return c.CodexHome, nil
	}
	if h := getenv("CODEX_HOME"); h != "" {
		if !filepath.IsAbs(h) {
			return "", errs.New(errs.ENOTCONF, "CODEX_HOME %q is not an absolute path; set codex_home in config.toml", h)
		}
		return filepath.Clean(h), nil
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".codex"), nil
	}
	return "", errs.New(errs.ENOTCONF, "no codex_home, CODEX_HOME or HOME to find the Codex home in")
}

// CodexBinaryName is the codex executable to run: codex_binary, else
// "codex" from PATH.
func (c Config) CodexBinaryName() string {
	if c.CodexBinary != "" {
		return c.CodexBinary
	}
	return "codex"
}
