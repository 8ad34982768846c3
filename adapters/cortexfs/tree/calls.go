package tree

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/internal/errs"
	"golang.org/x/sys/unix"
)

// A model's .d/status and .d/log belong to its calls: Materialize writes
// them once, when the object first appears (its registered status, an
// empty log), and never again; RecordCall rewrites both after each call.
// Neither ever holds what was said, a secret or a provider's message: the
// log says when, through which route and driver, how it ended (the error
// code) and the token counts (seed 001: secrets never in .d/ files).

// MaxLogBytes and MaxLogLines bound .d/log: once it grows past
// MaxLogBytes it is cut to its last MaxLogLines lines (the latest calls).
const (
	MaxLogBytes = 16 << 10
	MaxLogLines = 50
)

// Model states .d/status starts with, as the last call left them.
const (
	StatusReady        = "ready"        // no call yet, or the last one ended ok or cancelled
	StatusUnconfigured = "unconfigured" // the last call found no credential or no driver (ENOTCONF)
	StatusFailing      = "failing"      // the last call failed otherwise
)

// Call is one model call as RecordCall writes it down.
type Call struct {
	At        time.Time
	Run       string // the run id, when the call has its own (one-shot exec)
	Via       string // the route that chose the driver: exec, socket, agent
	Driver    string
	Code      errs.Code // the error's code; empty when the call ended ok
	Cancelled bool
	Duration  time.Duration
	// InputTokens and OutputTokens are the usage the driver reported, if any.
	InputTokens, OutputTokens *int64
}

// State is the status word the call leaves the model in.
func (c Call) State() string {
	switch {
	case c.Code == errs.ENOTCONF:
		return StatusUnconfigured
	case c.Code != "" && !c.Cancelled:
		return StatusFailing
	}
	return StatusReady
}

// Line renders the call as one line of .d/log.
func (c Call) Line() string {
	var b strings.Builder
	b.WriteString(c.At.UTC().Format(time.RFC3339Nano))
	if c.Run != "" {
		b.WriteString(" run=" + c.Run)
	}
	b.WriteString(" via=" + c.Via)
	if c.Driver != "" {
		b.WriteString(" driver=" + c.Driver)
	}
	switch {
	case c.Cancelled:
		b.WriteString(" status=cancelled")
	case c.Code != "":
		fmt.Fprintf(&b, " status=error code=%s", c.Code)
	default:
		b.WriteString(" status=ok")
	}
	fmt.Fprintf(&b, " ms=%d", c.Duration.Milliseconds())
	if c.InputTokens != nil {
		fmt.Fprintf(&b, " input_tokens=%d", *c.InputTokens)
	}
	if c.OutputTokens != nil {
		fmt.Fprintf(&b, " output_tokens=%d", *c.OutputTokens)
	}
	return b.String()
}

// statusLine is .d/status after the call: its state word, and the code
// that put it there. It changes only when the state does; the log says
// when each call was.
func (c Call) statusLine() string {
	s := c.State()
	if s != StatusReady {
		s += " code=" + string(c.Code)
	}
	return s + "\n"
}

// RecordCall appends c to the .d/log in ctlDir and sets .d/status from
// it. Calls run in many processes at once: an append holds a shared lock
// on the directory (one write of one line, O_APPEND), and cutting the
// log back to MaxLogLines an exclusive one; .d/status is replaced whole
// (temp file and rename), only when it changes, so a reader never sees a
// torn file. Nothing is fsynced: the files are a diagnostic view, and a
// call's answer must not wait on the disk.
func RecordCall(ctlDir string, c Call) error {
	d, err := os.Open(ctlDir)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "open %s", ctlDir)
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_SH); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "lock %s", ctlDir)
	}
	defer unix.Flock(int(d.Fd()), unix.LOCK_UN)
	logPath := filepath.Join(ctlDir, object.FileLog)
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, FileMode)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "open %s", logPath)
	}
	_, err = f.WriteString(c.Line() + "\n")
	var size int64
	if st, serr := f.Stat(); serr == nil {
		size = st.Size()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "append to %s", logPath)
	}
	statusPath := filepath.Join(ctlDir, object.FileStatus)
	if cur, _ := os.ReadFile(statusPath); string(cur) != c.statusLine() {
		if err := replace(statusPath, []byte(c.statusLine())); err != nil {
			return err
		}
	}
	if size <= MaxLogBytes {
		return nil
	}
	// Cut: no append may land in the file being replaced.
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "lock %s", ctlDir)
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "read %s", logPath)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) <= MaxLogLines {
		return nil
	}
	return replace(logPath, []byte(strings.Join(lines[len(lines)-MaxLogLines:], "\n")+"\n"))
}

// replace writes path whole through a temp file and a rename, 0600.
func replace(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "write %s", filepath.Base(path))
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	_, werr := io.Copy(f, bytes.NewReader(data))
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp, FileMode)
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		return errs.Wrap(errs.EINTERNAL, werr, "write %s", filepath.Base(path))
	}
	return nil
}
