package desktopsim

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Sandbox runs commands as a Desktop heartbeat would, against Home.
type Sandbox struct {
	Home string // the CBTH_HOME the heartbeat reads, made read-only
	// Dir holds the traces (outside Home, which is read-only inside).
	Dir string
}

// Tools reports what the sandbox needs and is missing: unshare (util-linux)
// and strace.
func Tools() error {
	var missing []string
	for _, t := range []string{"unshare", "strace", "mount"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return errors.New("the emulated heartbeat sandbox needs " + strings.Join(missing, ", ") + " (.ci/run installs them)")
	}
	return nil
}

// script sets the sandbox up inside the new mount namespace, then runs
// the command under strace: $1 the home, $2 the trace file, then the
// command.
const script = `set -eu
home=$1; trace=$2; shift 2
mount --bind "$home" "$home"
mount -o remount,bind,ro "$home"
if [ -d "$home/run" ]; then mount -t tmpfs -o ro,mode=0700 cbth-sandbox "$home/run"; fi
exec strace -f -qq -o "$trace" -e trace=` + "%s" + ` -- "$@"
`

// Run runs bin with args and the extra environment in the sandbox.
func (s Sandbox) Run(env []string, allow Allow, bin string, args ...string) (Result, error) {
	if err := Tools(); err != nil {
		return Result{}, err
	}
	trace, err := os.CreateTemp(s.Dir, "trace-*.txt")
	if err != nil {
		return Result{}, err
	}
	trace.Close()
	defer os.Remove(trace.Name())
	unshare := []string{"--mount", "--propagation", "private"}
	if os.Getuid() != 0 {
		unshare = append(unshare, "--map-root-user")
	}
	sh := strings.Replace(script, "%s", strings.Join(Traced, ","), 1)
	cmdArgs := append(unshare, "sh", "-c", sh, "sandbox", s.Home, trace.Name(), bin)
	cmd := exec.Command("unshare", append(cmdArgs, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = filepath.Dir(bin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		return r, err
	}
	if r.Violations, r.Calls, err = check(trace.Name(), s.Home, allow); err != nil {
		return r, err
	}
	if r.Calls == 0 {
		return r, errors.New("the sandbox trace is empty: " + r.Stderr)
	}
	return r, nil
}
