package provider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Serve is the helper side: it reads one request line from in, runs the
// named driver of set, writes the events to out and returns the exit
// status. Every outcome, a bad request included, ends with a done line.
func Serve(ctx context.Context, in io.Reader, out io.Writer, set driver.Set) int {
	e := &encoder{w: out}
	req, name, err := readRequest(in)
	if err != nil {
		return e.finish(err, false)
	}
	drv, ok := set[name]
	if !ok {
		return e.finish(errs.New(errs.ENOTCONF, "driver %q is not in this %s build", name, HelperName), false)
	}
	err = drv.Stream(ctx, req, e)
	return e.finish(err, driver.Canceled(ctx, err))
}

func readRequest(in io.Reader) (driver.Request, string, error) {
	line, err := readLine(bufio.NewReaderSize(in, 64<<10), MaxRequest)
	if err != nil {
		return driver.Request{}, "", err
	}
	var w WireRequest
	if err := json.Unmarshal(line, &w); err != nil {
		return driver.Request{}, "", errs.Wrap(errs.EINVAL, err, "request line is not a JSON object")
	}
	if w.V != Version {
		return driver.Request{}, "", errs.New(errs.EVERSION, "request protocol version %d, this helper speaks %d", w.V, Version)
	}
	if w.Driver == "" {
		return driver.Request{}, "", errs.New(errs.EINVAL, "request names no driver")
	}
	if err := driver.ValidateMessages(w.Messages); err != nil {
		return driver.Request{}, "", err
	}
	return w.Request(), w.Driver, nil
}

// readLine reads one newline-terminated line (or the rest of the input)
// of at most max bytes.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > max+1 {
			return nil, errs.New(errs.EMSGSIZE, "line is larger than %d bytes", max)
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return bytes.TrimRight(buf, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(bytes.TrimSpace(buf)) == 0 {
				return nil, io.EOF
			}
			return buf, nil
		default:
			return nil, err
		}
	}
}

// encoder writes body events and the closing lines. Each event is one
// write so the caller sees it at once.
type encoder struct {
	w    io.Writer
	werr error
}

// Emit implements stream.Sink for the driver.
func (e *encoder) Emit(ev stream.Event) error {
	switch ev.Type {
	case stream.TypeStart, stream.TypeError, stream.TypeDone, stream.TypePong:
		return errs.New(errs.EINTERNAL, "lifecycle event %s from a driver", ev.Type)
	}
	ev.Run, ev.ID = "", ""
	return e.write(ev)
}

func (e *encoder) write(ev stream.Event) error {
	if e.werr != nil {
		return e.werr
	}
	b, err := stream.Encode(ev)
	if err != nil {
		return err
	}
	if _, err := e.w.Write(b); err != nil {
		e.werr = errs.Wrap(errs.EINTERNAL, err, "write %s event", ev.Type)
	}
	return e.werr
}

func (e *encoder) finish(runErr error, cancelled bool) int {
	if errors.Is(runErr, io.EOF) {
		runErr = errs.New(errs.EINVAL, "no request line on stdin")
	}
	status, exit := stream.StatusOK, errs.ExitOK
	switch {
	case cancelled:
		status, exit = stream.StatusCancelled, errs.ExitGeneric
	case runErr != nil:
		status = stream.StatusError
		code := errs.CodeOf(runErr)
		exit = code.ExitCode()
		_ = e.write(stream.Event{Type: stream.TypeError, Code: code, Message: stream.PublicMessage(runErr)})
	}
	if err := e.write(stream.Event{Type: stream.TypeDone, Status: status}); err != nil && exit == errs.ExitOK {
		exit = errs.ExitInternal
	}
	return exit
}
