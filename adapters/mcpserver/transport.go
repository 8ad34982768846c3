package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cbth-dev/cbth/internal/errs"
)

// MaxLine bounds one inbound line (one JSON-RPC message or batch). The
// largest call cbth takes is MaxArguments of arguments; a line past the
// bound is answered with an error and skipped unread.
const MaxLine = 4 << 20

// idPrefix is how much of an oversized line is kept to find its request
// id: a JSON-RPC request names its id before its params.
const idPrefix = 4 << 10

// Stdio is the transport of `cbth mcp serve`: newline-delimited JSON-RPC
// on in and out, with every inbound line checked before the SDK reads it.
// The SDK ends the session at the first line it cannot decode, and Codex
// then has no cbth tools for the rest of its session; here a malformed
// line gets a JSON-RPC error (-32700 when it is not JSON, -32600 when it
// is not a message, -32600 with EMSGSIZE past MaxLine) and the server
// reads on.
func Stdio(in io.ReadCloser, out io.Writer) sdk.Transport {
	w := &lockedWriter{w: out}
	return &sdk.IOTransport{Reader: &guard{in: in, r: bufio.NewReaderSize(in, 64<<10), w: w, max: MaxLine}, Writer: w, MaxLineLength: -1}
}

// lockedWriter serializes writes, so that an error the guard writes and
// a message the SDK writes (each one Write of one whole line) never
// interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) Close() error { return nil }

// guard hands the SDK only lines that decode as JSON-RPC messages.
type guard struct {
	in      io.Closer
	r       *bufio.Reader
	w       io.Writer
	max     int
	pending []byte
	err     error // the read error to return once pending is handed over
}

func (g *guard) Close() error { return g.in.Close() }

func (g *guard) Read(p []byte) (int, error) {
	for len(g.pending) == 0 {
		if g.err != nil {
			return 0, g.err
		}
		g.pending, g.err = g.next()
	}
	n := copy(p, g.pending)
	g.pending = g.pending[n:]
	return n, nil
}

// next returns the next line that is a message, newline-terminated, and
// the read error that ended the input, if one did.
func (g *guard) next() ([]byte, error) {
	for {
		line, over, err := g.readLine()
		switch {
		case over:
			g.reply(idIn(line), jsonrpc.CodeInvalidRequest, errs.EMSGSIZE,
				fmt.Sprintf("EMSGSIZE: the line is over the %d byte limit; it was skipped", g.max))
		case len(bytes.TrimSpace(line)) > 0:
			if code, why := check(bytes.TrimSpace(line)); code != 0 {
				g.reply(idIn(line), code, errs.EINVAL, why)
			} else {
				return append(bytes.TrimRight(line, "\r\n"), '\n'), err
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

// readLine reads one line. Past the bound it keeps only the line's start
// (for its id) and reads the rest away.
func (g *guard) readLine() (line []byte, over bool, err error) {
	for {
		chunk, err := g.r.ReadSlice('\n')
		switch {
		case over:
		case len(line)+len(chunk) > g.max:
			over = true
			line = append(line, chunk...)[:min(len(line)+len(chunk), idPrefix)]
		default:
			line = append(line, chunk...)
		}
		if err != bufio.ErrBufferFull {
			return line, over, err
		}
	}
}

// check says why a line is not a JSON-RPC message or batch (code 0 when
// it is one).
func check(line []byte) (int, string) {
	if !json.Valid(line) {
		return jsonrpc.CodeParseError, "parse error: the line is not JSON"
	}
	msgs := []json.RawMessage{line}
	if line[0] == '[' {
		if err := json.Unmarshal(line, &msgs); err != nil || len(msgs) == 0 {
			return jsonrpc.CodeInvalidRequest, "invalid request: an empty batch"
		}
	}
	for _, m := range msgs {
		if _, err := jsonrpc.DecodeMessage(m); err != nil {
			return jsonrpc.CodeInvalidRequest, "invalid request: " + err.Error()
		}
	}
	return 0, ""
}

// idIn finds the request id at the top level of a (possibly cut) JSON
// object, so that the caller's pending request gets its answer; nil when
// there is none before the line ends or breaks.
func idIn(line []byte) any {
	dec := json.NewDecoder(bytes.NewReader(line))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil
		}
		var v any
		if k == "id" {
			if dec.Decode(&v) != nil {
				return nil
			}
			switch v.(type) {
			case string, float64:
				return v
			}
			return nil
		}
		if dec.Decode(&v) != nil {
			return nil
		}
	}
	return nil
}

// reply writes one JSON-RPC error response.
func (g *guard) reply(id any, code int, errCode errs.Code, msg string) {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": msg, "data": map[string]string{"code": string(errCode)}}})
	_, _ = g.w.Write(append(b, '\n'))
}
