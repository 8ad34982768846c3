package runner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
)

func out(stdout, stderr io.Writer, text bool) io.Writer {
	if text {
		return &textWriter{out: stdout, err: stderr}
	}
	return stdout
}

// textWriter is the --text compatibility mode: it reads the JSONL frames
// the stream writer produces and prints them for people. Answer text goes
// to stdout, errors to stderr.
type textWriter struct {
	out, err io.Writer
	midLine  bool
}

func (t *textWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		var e stream.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return 0, err
		}
		var werr error
		switch e.Type {
		case stream.TypeDelta:
			_, werr = io.WriteString(t.out, e.Text)
			t.midLine = len(e.Text) > 0 && e.Text[len(e.Text)-1] != '\n'
		case stream.TypeToolCall:
			t.newline()
			_, werr = fmt.Fprintf(t.out, "[tool_call %s %s]\n", e.Name, e.Arguments)
		case stream.TypeError:
			t.newline()
			_, werr = fmt.Fprintf(t.err, "error %s: %s\n", e.Code, e.Message)
		case stream.TypeDone:
			t.newline()
		}
		if werr != nil {
			return 0, werr
		}
	}
	return len(p), nil
}

func (t *textWriter) newline() {
	if t.midLine {
		io.WriteString(t.out, "\n")
		t.midLine = false
	}
}
