// Package remote carries channel envelopes between two cbth gateways over
// the user's own OpenSSH client, the way git and rsync reach a remote:
// the local daemon runs `ssh HOST cbth gateway serve --stdio` and the two
// speak a small framed protocol on the session's stdin and stdout
// (spec/channels.md, "ssh_remote over OpenSSH"). There is no SSH code
// here: host keys, keys, agents and ~/.ssh/config are ssh's.
//
// Link (link.go) is one ssh process and its handshake, Forwarder
// (forward.go) the local gateway's pool of links with the resume after a
// dropped one, Serve (serve.go) the remote end, a relay into that
// machine's own gateway socket.
package remote

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Protocol names the stdio protocol in its hello; Version is the one this
// cbth speaks. Two ends of different versions refuse each other
// (EVERSION) rather than guess.
const (
	Protocol = "cbth-gateway-stdio"
	Version  = 1
)

// MaxFrame bounds one frame, its kind and newline included. An envelope
// a client sends is at most envelope.MaxFrame; what a gateway sends back
// (an agent's message of up to a socket frame, re-encoded) may be
// larger, so the link allows some room above it.
const MaxFrame = 4 << 20

// Frame kinds. A frame is one line: the kind, one space, a JSON body.
const (
	// KindHello opens the link, from each end: a Hello.
	KindHello = "hello"
	// KindEnv carries one envelope line: to the remote, an envelope for
	// its gateway; back, an envelope its gateway wrote.
	KindEnv = "env"
	// KindPing is the remote's heartbeat: it is alive, even while its
	// gateway works on an answer.
	KindPing = "ping"
	// KindDrop stands for an envelope of an answer the remote did not
	// send because it is over MaxFrame: a Fault.
	KindDrop = "drop"
	// KindErr is a Fault that ends the link.
	KindErr = "err"
)

// Hello is the first frame each end sends.
type Hello struct {
	Protocol string `json:"protocol"`
	Version  int    `json:"version"`
	MaxFrame int    `json:"max_frame"`
	// HeartbeatMS is, from the local end, how often the remote should
	// say it is alive.
	HeartbeatMS int64 `json:"heartbeat_ms,omitempty"`
	// CBTH is the sender's cbth version, for messages.
	CBTH string `json:"cbth,omitempty"`
}

// Fault is an error with a stable code and a reason code: the body of
// err and drop frames, and what a failed forward returns.
type Fault struct {
	Code       errs.Code `json:"code"`
	ReasonCode string    `json:"reason,omitempty"`
	Message    string    `json:"message"`
}

func (f *Fault) Error() string { return f.Message }

// Unwrap gives errs.CodeOf the fault's code.
func (f *Fault) Unwrap() error { return &errs.Error{Code: f.Code, Message: f.Message} }

// Reason is the fault's reason code (adapters/gateway reads it so).
func (f *Fault) Reason() string { return f.ReasonCode }

func fault(code errs.Code, reason, format string, args ...any) *Fault {
	return &Fault{Code: code, ReasonCode: reason, Message: fmt.Sprintf(format, args...)}
}

// errFrameSize is what Next returns for a frame over the limit, which it
// skipped without holding.
var errFrameSize = errors.New("frame over the limit")

// frameReader reads frames of at most max bytes.
type frameReader struct {
	r *bufio.Reader
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, MaxFrame)}
}

// next returns the next frame's kind and body; the body is valid until
// the next call. A frame over MaxFrame is skipped and reported as
// errFrameSize with its kind when it could be read, and its size.
func (fr *frameReader) next() (kind string, body []byte, size int, err error) {
	line, err := fr.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		kb, _, _ := bytes.Cut(line, []byte(" "))
		k := string(kb)
		if len(k) > 16 {
			k = ""
		}
		n := len(line)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = fr.r.ReadSlice('\n')
			n += len(line)
		}
		if err != nil {
			return k, nil, n, err
		}
		return k, nil, n, errFrameSize
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return "", nil, len(line), err
	}
	line = bytes.TrimRight(line, "\r\n")
	k, b, _ := bytes.Cut(line, []byte(" "))
	return string(k), b, len(line), nil
}

// appendFrame appends one frame to dst.
func appendFrame(dst []byte, kind string, body []byte) []byte {
	dst = append(dst, kind...)
	dst = append(dst, ' ')
	dst = append(dst, body...)
	return append(dst, '\n')
}

func jsonFrame(kind string, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte("{}")
	}
	return appendFrame(nil, kind, b)
}
