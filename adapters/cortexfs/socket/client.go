package socket

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Chat is the interactive client of a model socket (the `ctx` REPL). Each
// input line is sent as one turn of session; answer text goes to out,
// errors to errOut. The first interrupt during a run sends cancel; a second
// one, an interrupt while idle, the end of input, or a broken connection
// ends Chat. Chat only reads and writes conn; closing it is the caller's.
func Chat(ctx context.Context, conn io.ReadWriter, sessionName string, in io.Reader, out, errOut io.Writer, interrupts <-chan os.Signal) error {
	events := make(chan stream.Event)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(conn)
		sc.Buffer(make([]byte, 64<<10), MaxFrame+1)
		for sc.Scan() {
			var e stream.Event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			select {
			case events <- e:
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
		close(events)
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		close(lines)
	}()
	send := func(v map[string]string) error {
		b, _ := json.Marshal(v)
		if _, err := conn.Write(append(b, '\n')); err != nil {
			return errs.Wrap(errs.EHOSTDOWN, err, "socket write")
		}
		return nil
	}
	busy, cancelled, inputDone := false, false, false
	run, n := "", 0
	for {
		var lineCh <-chan string
		if !busy && !inputDone {
			lineCh = lines // take the next turn only when idle
		}
		if !busy && inputDone {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case line, ok := <-lineCh:
			if !ok {
				inputDone = true
				continue
			}
			if line == "" {
				continue
			}
			n++
			if err := send(map[string]string{"op": OpSend, "id": fmt.Sprintf("msg-%d", n), "session": sessionName, "input": line}); err != nil {
				return err
			}
			busy, cancelled, run = true, false, ""
		case e, ok := <-events:
			if !ok {
				return errs.New(errs.EHOSTDOWN, "connection closed")
			}
			switch e.Type {
			case stream.TypeStart:
				run = e.Run
			case stream.TypeDelta:
				io.WriteString(out, e.Text)
			case stream.TypeToolCall:
				fmt.Fprintf(out, "\n[tool_call %s %s]\n", e.Name, e.Arguments)
			case stream.TypeError:
				fmt.Fprintf(errOut, "error %s: %s\n", e.Code, e.Message)
				if e.Run == "" {
					busy = false // the request itself was refused
				}
			case stream.TypeDone:
				io.WriteString(out, "\n")
				busy = false
			}
		case <-interrupts:
			if !busy || cancelled || run == "" {
				return nil
			}
			cancelled = true
			if err := send(map[string]string{"op": OpCancel, "id": run}); err != nil {
				return err
			}
		}
	}
}
