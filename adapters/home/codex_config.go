package home

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
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

// LookCodex resolves a codex_binary (a name or an absolute path) to an
// absolute path. A name is looked up on this process's PATH: in the
// daemon, the PATH of the shell that started it, which may lack a Codex
// the user's own shell has found since; the error says how to get past
// that, since the daemon's PATH is not the one the user sees.
func LookCodex(b string) (string, error) {
	bin, err := exec.LookPath(b)
	if err == nil {
		bin, err = filepath.Abs(bin)
	}
	if err == nil {
		return bin, nil
	}
	if errors.Is(err, exec.ErrNotFound) && !strings.ContainsRune(b, '/') {
		// The PATH itself is left out: this message may be recorded in
		// the log (a rejected plugin delivery's reason).
		return "", errs.New(errs.ENOTCONF, "codex_binary %q is not on the daemon's PATH, which is the PATH of the shell that started the daemon (or, for cbth service, the service manager's): "+
			"give its absolute path (codex_binary in config.toml, or --codex-binary), install Codex there (npm install -g @openai/codex), "+
			"or run cbth daemon restart from a shell that finds %s", b, b)
	}
	return "", errs.Wrap(errs.ENOTCONF, err, "codex_binary %q", b)
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

// CLI is the [cli] section: the Codex CLI delivery target
// (adapters/codex/clitarget, spec/codex-cli.md section 16).
type CLI struct {
	// AcceptanceTimeout bounds one turn/start: from the request to its
	// answer. A cold Codex took up to 60 s to accept a turn in live runs
	// (../shared/research/upstream-facts.md D10), hence 90 s.
	AcceptanceTimeout Duration `toml:"acceptance_timeout"`
	// ObservationWindow is how long an accepted turn is observed before
	// it is parked expired; delivered turns can run for hours (D11).
	ObservationWindow Duration `toml:"observation_window"`
	// ReconcileWindow bounds the search by correlation marker after a
	// turn/start that got no answer, and SettleDelay is how long the
	// thread must be seen idle without the marker before the request is
	// proven not accepted.
	ReconcileWindow Duration `toml:"reconcile_window"`
	SettleDelay     Duration `toml:"settle_delay"`
	// Trust is how far every thread's deliveries are trusted unless the
	// user trusted the thread itself (cbth thread trust): "strict" (the
	// default: a turn without a foreground only while every effective
	// permission is false) or "own_permissions" (a turn with the thread's
	// own permissions, repeated exactly). The snapshots and drift records
	// go on either way.
	Trust string `toml:"trust"`
	// TrustedAll is the older spelling of trust = "own_permissions".
	TrustedAll bool `toml:"trusted_all"`
	// CodexDaemon delivers into threads the user's own Codex daemon
	// serves (a plain `codex`), without `cbth cli run` (on by default).
	CodexDaemon bool `toml:"codex_daemon"`
	// QueueHandoff hands a result to Codex's own queue (`codex queue`)
	// when the Codex daemon does not run, for threads trusted with their
	// own permissions only (off by default).
	QueueHandoff bool `toml:"queue_handoff"`
	// Steer turns the turn/steer optimization on (off by default).
	Steer bool `toml:"steer"`
	// PassEnv names variables of the daemon's environment that the Codex
	// app-servers it starts get beyond ChildEnvNames (OPENAI_API_KEY,
	// when Codex authenticates by it).
	PassEnv []string `toml:"pass_env"`
}

// ChildEnvNames are the variables of the daemon's environment that the
// programs it starts for itself (Codex app-servers) get: what a program
// needs to find its files, speak the user's language and reach the
// network. The daemon's environment is that of whichever command first
// started it, so anything else in it (another tool's tokens, a shell's
// secrets) stays in the daemon.
var ChildEnvNames = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "TMPDIR", "TZ",
	"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"}

// ChildEnv is the environment of a Codex app-server the daemon starts:
// ChildEnvNames and [cli] pass_env, from lookup (the daemon's own).
func (c Config) ChildEnv(lookup func(string) (string, bool)) []string {
	env := []string{}
	for _, n := range append(slices.Clone(ChildEnvNames), c.CLI.PassEnv...) {
		if v, ok := lookup(n); ok && !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, n+"=") }) {
			env = append(env, n+"="+v)
		}
	}
	return env
}

// CLIDefaults are the [cli] defaults.
func CLIDefaults() CLI {
	return CLI{
		AcceptanceTimeout: Duration{90 * time.Second},
		ObservationWindow: Duration{6 * time.Hour},
		ReconcileWindow:   Duration{30 * time.Second},
		SettleDelay:       Duration{2 * time.Second},
		CodexDaemon:       true,
	}
}

// HomeTrust is the trust every thread gets unless the user trusted it
// itself: [cli] trust, or own_permissions for trusted_all.
func (cl CLI) HomeTrust() string {
	if cl.Trust != "" {
		return cl.Trust
	}
	if cl.TrustedAll {
		return events.TrustOwnPermissions
	}
	return events.TrustStrict
}

// checkCLI refuses [cli] settings the daemon cannot honour.
func checkCLI(c Config) error {
	cl := c.CLI
	if cl.AcceptanceTimeout.Duration <= 0 || cl.ReconcileWindow.Duration <= 0 || cl.SettleDelay.Duration < 0 {
		return errs.New(errs.EINVAL, "[cli] acceptance_timeout and reconcile_window must be positive, settle_delay not negative")
	}
	if cl.Trust != "" && cl.Trust != events.TrustStrict && cl.Trust != events.TrustOwnPermissions {
		return errs.New(errs.EINVAL, "[cli] trust %q is not %q or %q", cl.Trust, events.TrustStrict, events.TrustOwnPermissions)
	}
	if cl.Trust == events.TrustStrict && cl.TrustedAll {
		return errs.New(errs.EINVAL, "[cli] trust = \"strict\" and trusted_all = true contradict each other; trusted_all is the older spelling of trust = \"own_permissions\"")
	}
	if cl.SettleDelay.Duration >= cl.ReconcileWindow.Duration {
		return errs.New(errs.EINVAL, "[cli] settle_delay (%s) must be shorter than reconcile_window (%s)", cl.SettleDelay.Duration, cl.ReconcileWindow.Duration)
	}
	// As for [delivery]: the daemon stays up while it observes a turn and
	// leaves after idle_timeout; the window must outlast the idle timeout.
	if cl.ObservationWindow.Duration <= c.IdleTimeout.Duration {
		return errs.New(errs.EINVAL, "[cli] observation_window (%s) must be longer than idle_timeout (%s)",
			cl.ObservationWindow.Duration, c.IdleTimeout.Duration)
	}
	return nil
}
