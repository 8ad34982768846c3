// Package home lays out $CBTH_HOME: the private directory that holds the
// log, the socket, the daemon's lock and log file, artifacts and file
// projections. Everything in it is created 0700 (directories) or 0600
// (files, temp files included), because cbth is same-user only.
package home

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/internal/atomicfile"
	"github.com/cbth-dev/cbth/internal/errs"
	toml "github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"
)

// Modes of everything cbth creates.
const (
	DirMode  os.FileMode = 0o700
	FileMode os.FileMode = 0o600
)

// Home is one $CBTH_HOME.
type Home struct {
	Root string
}

// Resolve returns the home named by $CBTH_HOME, else ~/.cbth. getenv is
// passed in so callers (and tests) control the environment.
func Resolve(getenv func(string) string) (Home, error) {
	if h := getenv("CBTH_HOME"); h != "" {
		abs, err := filepath.Abs(h)
		if err != nil {
			return Home{}, errs.Wrap(errs.EINVAL, err, "CBTH_HOME %q", h)
		}
		return Home{Root: abs}, nil
	}
	base := getenv("HOME")
	if base == "" {
		d, err := os.UserHomeDir()
		if err != nil {
			return Home{}, errs.Wrap(errs.EINVAL, err, "no CBTH_HOME and no home directory")
		}
		base = d
	}
	return Home{Root: filepath.Join(base, ".cbth")}, nil
}

// Paths inside the home.
func (h Home) DB() string            { return filepath.Join(h.Root, "cbth.db") }
func (h Home) RunDir() string        { return filepath.Join(h.Root, "run") }
func (h Home) Socket() string        { return filepath.Join(h.Root, "run", "cbth.sock") }
func (h Home) GatewaySocket() string { return filepath.Join(h.Root, "run", "gateway.sock") }
func (h Home) Lock() string          { return filepath.Join(h.Root, "run", "daemon.lock") }
func (h Home) LogDir() string        { return filepath.Join(h.Root, "log") }
func (h Home) DaemonLog() string     { return filepath.Join(h.Root, "log", "daemon.log") }
func (h Home) Artifacts() string     { return filepath.Join(h.Root, "artifacts") }
func (h Home) Config() string        { return filepath.Join(h.Root, "config.toml") }
func (h Home) Inbox() string         { return filepath.Join(h.Root, "inbox") }
func (h Home) DebugDir() string      { return filepath.Join(h.Root, "debug") }
func (h Home) CtxRoot() string       { return filepath.Join(h.Root, "ctx") }
func (h Home) TempDir() string       { return filepath.Join(h.Root, "tmp") }
func (h Home) TasksDir() string      { return filepath.Join(h.Root, "tasks") }
func (h Home) ArtifactDir(id string) string {
	return filepath.Join(h.Root, "artifacts", id)
}

// Ensure creates the home and its fixed subdirectories with mode 0700 and
// tightens them if they exist with wider modes. A home owned by another
// user is refused.
func (h Home) Ensure() error {
	for _, d := range []string{h.Root, h.RunDir(), h.LogDir(), h.Artifacts(), h.TempDir()} {
		if err := ensureDir(d, d == h.RunDir()); err != nil {
			return err
		}
	}
	return nil
}

// EnsureDir creates dir (and parents) 0700, checks it is owned by this
// user, and narrows its mode to 0700. A symbolic link at dir is followed
// only when this user owns it (see checkLink).
func EnsureDir(dir string) error { return ensureDir(dir, false) }

func ensureDir(dir string, strict bool) error { return ensureDirAs(dir, strict, os.Getuid()) }

// ensureDirAs is ensureDir for the user uid: the owner a link or the
// directory must have (a seam so the rule is tested without a second
// user).
func ensureDirAs(dir string, strict bool, uid int) error {
	if err := checkLink(dir, strict, uid); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return errs.Wrap(errs.EACCES, err, "create %s", dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return errs.Wrap(errs.EACCES, err, "stat %s", dir)
	}
	if err := checkOwner(dir, fi, uid); err != nil {
		return err
	}
	if fi.Mode().Perm() != DirMode {
		if err := os.Chmod(dir, DirMode); err != nil {
			return errs.Wrap(errs.EACCES, err, "chmod %s", dir)
		}
	}
	return nil
}

// WriteFileAtomic replaces path with data, mode 0600, atomically and
// durably (atomicfile.Write).
func WriteFileAtomic(path string, data []byte) error { return atomicfile.Write(path, data, FileMode) }

// SyncDir fsyncs a directory so a rename in it is durable.
func SyncDir(dir string) error { return atomicfile.SyncDir(dir) }

// Config is $CBTH_HOME/config.toml. Every field has a default; the file
// may be absent.
type Config struct {
	IdleTimeout    Duration `toml:"idle_timeout"`
	MaxResultBytes int64    `toml:"max_result_bytes"`
	MinArtifactTTL Duration `toml:"min_artifact_ttl"`
	PostCloseTTL   Duration `toml:"post_close_ttl"`
	OrphanGrace    Duration `toml:"orphan_grace"`
	JobTimeout     Duration `toml:"job_timeout"`
	Delivery       Delivery `toml:"delivery"`
	ParkHook       []string `toml:"park_hook"`
	Task           Task     `toml:"task"`
	// The Codex CLI adapter (adapters/home/codex_config.go).
	CodexBinary string  `toml:"codex_binary"`
	CodexHome   string  `toml:"codex_home"`
	CLI         CLI     `toml:"cli"`
	Desktop     Desktop `toml:"desktop"`
	// CortexFS trees: shared session spaces (adapters/home/ctx_config.go).
	Ctx Ctx `toml:"ctx"`
	// The agent's MCP tools (adapters/home/mcp_config.go).
	MCP MCP `toml:"mcp"`
	// The gateway's bounds and the rotation of the daemon's own files
	// (adapters/home/log_config.go).
	Gateway Gateway `toml:"gateway"`
	Log     Log     `toml:"log"`
}

// Delivery holds the delivery-core knobs (used by the delivery scheduler).
type Delivery struct {
	MaxJobsPerBatch     int      `toml:"max_jobs_per_batch"`
	MaxTotalBytes       int64    `toml:"max_total_bytes"`
	MaxWaitWindow       Duration `toml:"max_wait_window"`
	MinSendInterval     Duration `toml:"min_send_interval"`
	Cooldown            Duration `toml:"cooldown"`
	RedeliveryWindow    Duration `toml:"redelivery_window"`
	MaxDeliveryAttempts int      `toml:"max_delivery_attempts"`
	EligibleBackoff     Duration `toml:"eligible_backoff"`
	// EligibleBackoffMax caps the doubling back-off after repeated
	// rejects; EligibleBackoffJitter is the share of each wait, in
	// [0, 1), drawn off it (engine/command.Backoff).
	EligibleBackoffMax    Duration `toml:"eligible_backoff_max"`
	EligibleBackoffJitter float64  `toml:"eligible_backoff_jitter"`
	InlinePayloadLimit    int64    `toml:"inline_payload_limit"`
	ObservationWindow     Duration `toml:"observation_window"`
	SweepInterval         Duration `toml:"sweep_interval"`
	DeliveryTimeout       Duration `toml:"delivery_timeout"`
	Workers               int      `toml:"workers"`
}

// Duration is a time.Duration written as "10m" in TOML.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText renders the duration.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }

// Defaults returns the built-in configuration.
func Defaults() Config {
	return Config{
		IdleTimeout:    Duration{10 * time.Minute},
		MaxResultBytes: 64 << 20,
		MinArtifactTTL: Duration{24 * time.Hour},
		PostCloseTTL:   Duration{72 * time.Hour},
		OrphanGrace:    Duration{10 * time.Minute},
		JobTimeout:     Duration{24 * time.Hour},
		Delivery: Delivery{
			MaxJobsPerBatch:       8,
			MaxTotalBytes:         256 << 10,
			MaxWaitWindow:         Duration{2 * time.Second},
			MinSendInterval:       Duration{30 * time.Second},
			Cooldown:              Duration{2 * time.Minute},
			RedeliveryWindow:      Duration{24 * time.Hour},
			MaxDeliveryAttempts:   5,
			EligibleBackoff:       Duration{time.Minute},
			EligibleBackoffMax:    Duration{time.Hour},
			EligibleBackoffJitter: 0.2,
			InlinePayloadLimit:    16 << 10,
			ObservationWindow:     Duration{30 * time.Minute},
			SweepInterval:         Duration{time.Second},
			DeliveryTimeout:       Duration{30 * time.Second},
			Workers:               16,
		},
		Desktop: DesktopDefaults(),
		Task:    TaskDefaults(),
		CLI:     CLIDefaults(),
		Gateway: GatewayDefaults(),
		Log:     LogDefaults(),
	}
}

// LoadConfig reads config.toml over the defaults, then applies
// CBTH_IDLE_TIMEOUT from the environment. Unknown keys are an error, so a
// typo does not silently fall back to a default.
func (h Home) LoadConfig(getenv func(string) string) (Config, error) {
	c := Defaults()
	f, err := os.Open(h.Config())
	switch {
	case err == nil:
		dec := toml.NewDecoder(f).DisallowUnknownFields()
		err = dec.Decode(&c)
		f.Close()
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) && len(strict.Errors) > 0 {
			return c, errs.New(errs.EINVAL, "%s: unknown key %q", h.Config(), strings.Join(strict.Errors[0].Key(), "."))
		}
		var bad *toml.DecodeError
		if errors.As(err, &bad) {
			row, col := bad.Position()
			where := fmt.Sprintf("%s:%d:%d", h.Config(), row, col)
			if k := bad.Key(); len(k) > 0 {
				where += ": " + strings.Join(k, ".")
			}
			return c, errs.Wrap(errs.EINVAL, err, "%s", where)
		}
		if err != nil {
			return c, errs.Wrap(errs.EINVAL, err, "read %s", h.Config())
		}
	case !os.IsNotExist(err):
		return c, errs.Wrap(errs.EINVAL, err, "read %s", h.Config())
	}
	if v := getenv("CBTH_IDLE_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return c, errs.New(errs.EINVAL, "CBTH_IDLE_TIMEOUT=%q is not a positive duration", v)
		}
		c.IdleTimeout.Duration = d
	}
	if err := h.checkValues(c); err != nil {
		return c, err
	}
	if err := checkCodex(&c, getenv); err != nil {
		return c, err
	}
	if err := checkDelivery(c); err != nil {
		return c, err
	}
	if err := checkCLI(c); err != nil {
		return c, err
	}
	if err := h.checkCtx(c); err != nil {
		return c, err
	}
	if err := h.checkMCP(c); err != nil {
		return c, err
	}
	if err := h.checkLog(&c); err != nil {
		return c, err
	}
	return c, h.checkTask(&c)
}

// DaemonRunning reports whether a daemon holds this home's lock. It probes
// the flock itself, which the kernel drops the moment the daemon exits,
// rather than the pid, which lingers while the process waits to be reaped.
func (h Home) DaemonRunning() bool {
	f, err := os.OpenFile(h.Lock(), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return true
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
