package provider

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/cred/credenv"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/debug"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/confine"
	"github.com/cbth-dev/cbth/internal/errs"
)

// KillDelay is how long a cancelled helper gets between SIGTERM and
// SIGKILL.
const KillDelay = 2 * time.Second

// Drivers is the driver set of the cbth binary: debug in-process, every
// network driver through the helper. stderr receives the helper's stderr
// (nil discards it).
func Drivers(stderr io.Writer) driver.Set {
	s := driver.Set{debug.Name: debug.Echo{}}
	for _, n := range Names {
		s[n] = Remote{Driver: n, Stderr: stderr, Confine: true}
	}
	return s
}

// HelperEnv is the helper's whole environment, taken from lookup (the
// caller's): PATH, HOME, LANG and TERM; the variables its credential
// may be in (the provider's own, and the model's api_key_env), and no
// other provider's; the session bus and runtime directory, for the
// keychain; the proxy and certificate settings an HTTPS client honours.
// Nothing else of the caller's environment reaches it.
func HelperEnv(lookup func(string) (string, bool), provider, keyEnv string) []string {
	names := credenv.EnvNames(provider, keyEnv)
	names = append(names, "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR", "SSL_CERT_FILE", "SSL_CERT_DIR",
		"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")
	return confine.BaseEnv(lookup, names...)
}

// HelperPolicy is the helper's confinement: the system's directories
// read-only, its own binary, the session bus's directory (keychain); no
// writable directory at all.
func HelperPolicy(lookup func(string) (string, bool), helper string) confine.Policy {
	p := confine.Policy{Exec: []string{helper}}
	if d, ok := lookup("XDG_RUNTIME_DIR"); ok && filepath.IsAbs(d) {
		p.Unix = []string{d}
	}
	return p
}

// Locator finds the helper binary.
type Locator struct {
	LookupEnv  func(string) (string, bool)
	Executable func() (string, error)
	LookPath   func(string) (string, error)
}

// ProcessLocator looks where a real process should: $CBTH_PROVIDERS, then
// next to the running executable (symlinks resolved), then PATH.
func ProcessLocator() Locator {
	return Locator{LookupEnv: os.LookupEnv, Executable: os.Executable, LookPath: exec.LookPath}
}

// Locate returns the path of the helper that carries every driver, or
// ENOTCONF (exit 69) naming where it looked: a cbth without its helper is
// an install that is not configured for network models, not a provider
// that is down.
func (l Locator) Locate() (string, error) { return l.locate("") }

// LocateFor returns the path of the helper to start for a call through
// driver: $CBTH_PROVIDERS when set, else the driver's SDK helper
// (HelperFor) where it is installed, else the helper that carries every
// driver, each looked for next to the running executable, then on PATH.
func (l Locator) LocateFor(driver string) (string, error) { return l.locate(HelperFor(driver)) }

func (l Locator) locate(sdkHelper string) (string, error) {
	if l.LookupEnv != nil {
		if p, ok := l.LookupEnv(EnvHelper); ok && p != "" {
			if isExecutable(p) {
				return p, nil
			}
			return "", errs.New(errs.ENOTCONF, "provider helper $%s=%s is not an executable file", EnvHelper, p)
		}
	}
	names := []string{HelperName}
	if sdkHelper != "" {
		names = []string{sdkHelper, HelperName}
	}
	var looked []string
	if l.Executable != nil {
		if exe, err := l.Executable(); err == nil {
			if real, err := filepath.EvalSymlinks(exe); err == nil {
				exe = real
			}
			for _, n := range names {
				if p := filepath.Join(filepath.Dir(exe), n); isExecutable(p) {
					return p, nil
				}
			}
			looked = append(looked, filepath.Dir(exe))
		}
	}
	if l.LookPath != nil {
		for _, n := range names {
			if p, err := l.LookPath(n); err == nil {
				return p, nil
			}
		}
		looked = append(looked, "$PATH")
	}
	return "", errs.New(errs.ENOTCONF, "provider helper %s is not installed (looked in $%s, %s); network models need it next to cbth (cbth install puts it there)",
		strings.Join(names, " or "), EnvHelper, strings.Join(looked, ", "))
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// Remote runs one network driver in the helper process.
type Remote struct {
	Driver string
	// Locator finds the helper; zero means ProcessLocator.
	Locator Locator
	// Stderr receives the helper's stderr; nil discards it.
	Stderr io.Writer
	// Confine runs the helper through the confinement wrapper (this
	// binary as confine.ProgramName, so only cbth itself sets it), in
	// "/", with HelperEnv. Without it the helper still gets HelperEnv and
	// "/", unconfined.
	Confine bool
}

// Stream implements driver.Driver: it starts the helper, writes the request
// line, passes body events to out as they arrive, and turns the closing
// lines into the returned error. Cancelling ctx sends the helper SIGTERM,
// then SIGKILL after KillDelay.
func (r Remote) Stream(ctx context.Context, req driver.Request, out stream.Sink) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	loc := r.Locator
	if loc.LookupEnv == nil && loc.Executable == nil && loc.LookPath == nil {
		loc = ProcessLocator()
	}
	path, err := loc.LocateFor(r.Driver)
	if err != nil {
		return err
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // it runs from "/"
	}
	line, err := json.Marshal(Wire(r.Driver, req))
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "encode helper request")
	}
	lookup := loc.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	keyEnv, _ := req.Default("api_key_env")
	env := HelperEnv(lookup, req.Provider, keyEnv)
	cmd := exec.CommandContext(ctx, path)
	if r.Confine {
		if cmd, err = confine.Command(ctx, HelperPolicy(lookup, path), nil, []string{path}, env); err != nil {
			return errs.Wrap(errs.EINTERNAL, err, "confine the provider helper")
		}
	}
	// Run outside the caller's working directory, with none of the
	// caller's environment but what HelperEnv keeps.
	cmd.Dir, cmd.Env = "/", env
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = KillDelay
	cmd.Stdin = strings.NewReader(string(line) + "\n")
	cmd.Stderr = r.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "helper pipe")
	}
	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errs.Wrap(errs.ENOTCONF, err, "provider helper %s cannot be started", path)
	}
	if r.Confine {
		confine.Started(ctx, cmd)
	}
	res, readErr := readEvents(bufio.NewReaderSize(stdout, 64<<10), out)
	if readErr != nil {
		// The helper broke the protocol or our own output failed: stop it.
		_ = cmd.Process.Kill()
	}
	// Nothing should follow done; drain a little so a helper that keeps
	// writing cannot block its own exit, and stop one that writes more.
	if n, _ := io.CopyN(io.Discard, stdout, MaxFrame); n == MaxFrame {
		_ = cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if readErr != nil {
		return readErr
	}
	if !res.done {
		return errs.New(errs.EINTERNAL, "provider helper %s ended without finishing its stream (%s)", HelperName, exitDesc(waitErr))
	}
	switch res.status {
	case stream.StatusOK:
		return nil
	case stream.StatusError:
		return res.err
	default: // cancelled, though we did not cancel it: someone signalled it
		return errs.New(errs.EHOSTDOWN, "provider helper %s was interrupted", HelperName)
	}
}

type result struct {
	done   bool
	status string
	err    error
}

// readEvents reads helper lines until done or EOF.
func readEvents(r *bufio.Reader, out stream.Sink) (result, error) {
	var res result
	for {
		line, err := readLine(r, MaxFrame)
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return res, errs.Wrap(errs.EINTERNAL, err, "read from provider helper")
		}
		var ev stream.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return res, errs.New(errs.EINTERNAL, "provider helper wrote a line that is not a JSON event")
		}
		switch ev.Type {
		case stream.TypeDelta, stream.TypeMessage, stream.TypeReasoningDelta, stream.TypeReasoningMessage,
			stream.TypeToolCall, stream.TypeUsage:
			if res.err != nil {
				return res, errs.New(errs.EINTERNAL, "provider helper wrote %s after error", ev.Type)
			}
			ev.Run, ev.ID = "", ""
			if err := out.Emit(ev); err != nil {
				return res, err
			}
		case stream.TypeError:
			if res.err != nil {
				return res, errs.New(errs.EINTERNAL, "provider helper wrote two error events")
			}
			code := ev.Code
			if code == "" {
				code = errs.EINTERNAL
			}
			res.err = &errs.Error{Code: code, Message: ev.Message}
		case stream.TypeDone:
			switch ev.Status {
			case stream.StatusOK, stream.StatusCancelled:
				if res.err != nil {
					return res, errs.New(errs.EINTERNAL, "provider helper wrote done %s after error", ev.Status)
				}
			case stream.StatusError:
				if res.err == nil {
					res.err = errs.New(errs.EINTERNAL, "provider helper failed without saying why")
				}
			default:
				return res, errs.New(errs.EINTERNAL, "provider helper wrote done with status %q", ev.Status)
			}
			res.done, res.status = true, ev.Status
			return res, nil
		default:
			return res, errs.New(errs.EINTERNAL, "provider helper wrote a %q event", ev.Type)
		}
	}
}

func exitDesc(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("killed by signal %d", int(ws.Signal()))
		}
		return fmt.Sprintf("exit status %d", ee.ExitCode())
	}
	if err != nil {
		return err.Error()
	}
	return "exit status 0"
}
