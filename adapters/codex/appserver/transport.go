package appserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/internal/errs"
)

// MaxMessage bounds one message on either transport. The app-server says
// it sends at most 16 MiB unfragmented (its x-codex-websocket-max-
// unfragmented-message-bytes header); a thread read with every turn can be
// large, so the limit leaves room above that.
const MaxMessage = 64 << 20

// Transport carries whole JSON-RPC messages. Read is called from one
// goroutine; Write may be called from many.
type Transport interface {
	// Read returns the next message, or an error once the peer is gone.
	Read(ctx context.Context) ([]byte, error)
	Write(ctx context.Context, msg []byte) error
	Close() error
}

// lineReader splits newline-delimited JSON: one message per line, blank
// lines skipped, a line longer than max an error.
type lineReader struct {
	r   *bufio.Reader
	max int
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// errLineTooLong is returned (wrapped) for a line over the limit; the
// stream cannot be resynchronised safely after it, so it is fatal.
var errLineTooLong = errors.New("line too long")

func (l *lineReader) next() ([]byte, error) {
	for {
		var line []byte
		for {
			chunk, err := l.r.ReadSlice('\n')
			n := len(line) + len(chunk)
			if n > 0 && chunk[len(chunk)-1] == '\n' {
				n-- // the newline is framing, not content
			}
			if n > l.max {
				return nil, errs.Wrap(errs.EMSGSIZE, errLineTooLong, "codex app-server line over %d bytes", l.max)
			}
			line = append(line, chunk...)
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				if err == io.EOF && len(bytes.TrimSpace(line)) > 0 {
					// A last message without its newline still counts.
					return bytes.TrimSpace(line), nil
				}
				return nil, err
			}
			break
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return line, nil
		}
	}
}

// stdio is newline-delimited JSON over a child's stdin and stdout: the
// app-server's default transport.
type stdio struct {
	lines *lineReader
	mu    sync.Mutex // serialises writes
	w     io.Writer
	close func() error
}

// NewStdio makes a transport of a reader (the peer's output) and a writer
// (its input); closeFn is called once by Close.
func NewStdio(r io.Reader, w io.Writer, closeFn func() error) Transport {
	return &stdio{lines: newLineReader(r, MaxMessage), w: w, close: sync.OnceValue(closeFn)}
}

func (s *stdio) Read(context.Context) ([]byte, error) { return s.lines.next() }

// Write ignores ctx: a pipe write blocks only while the peer does not read,
// and Close (which closes the pipe) unblocks it.
func (s *stdio) Write(_ context.Context, msg []byte) error {
	if bytes.IndexByte(msg, '\n') >= 0 {
		return errs.New(errs.EINVAL, "a message on the stdio transport must be one line")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	buf := make([]byte, 0, len(msg)+1)
	_, err := s.w.Write(append(append(buf, msg...), '\n'))
	return err
}

func (s *stdio) Close() error { return s.close() }

// StdioExitWait bounds how long Close waits for a stdio app-server to exit
// after its stdin closed before killing it.
const StdioExitWait = 5 * time.Second

// StartStdio starts cmd (a `codex app-server` with the default stdio
// transport) and returns a transport on its stdin and stdout. Closing the
// transport closes stdin, which makes the app-server exit; one that has not
// exited after StdioExitWait is killed. cmd.Stderr is left as the caller
// set it.
func StartStdio(cmd *exec.Cmd) (Transport, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, errs.Wrap(errs.EHOSTDOWN, err, "start %s", cmd.Path)
	}
	done := make(chan error, 1)
	waited := make(chan struct{})
	closeFn := func() error {
		in.Close()
		go func() { done <- cmd.Wait(); close(waited) }()
		select {
		case err := <-done:
			return exitErr(err)
		case <-time.After(StdioExitWait):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-waited
			return fmt.Errorf("codex app-server did not exit within %v of its stdin closing; killed", StdioExitWait)
		}
	}
	return NewStdio(out, in, closeFn), nil
}

// exitErr treats an exit on stdin's end as clean whatever its status: the
// app-server was asked to go.
func exitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil
	}
	return err
}
