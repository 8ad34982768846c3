package remote

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

// ssh says why it failed only in words (exit 255 for all): each wording
// of its own failures maps to a stable code and reason.
func TestClassifySSH(t *testing.T) {
	for _, c := range []struct {
		said   string
		code   errs.Code
		reason string
	}{
		{"Host key verification failed.", errs.EACCES, ReasonHostKey},
		{"@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@", errs.EACCES, ReasonHostKey},
		{"me@box: Permission denied (publickey).", errs.EACCES, ReasonSSHAuth},
		{"ssh: connect to host 127.0.0.1 port 1: Connection refused", errs.EHOSTDOWN, ReasonSSHConnect},
		{"ssh: connect to host 192.0.2.1 port 22: Connection timed out", errs.EHOSTDOWN, ReasonSSHConnect},
		{"ssh: Could not resolve hostname nowhere: Name or service not known", errs.EHOSTDOWN, ReasonSSHConnect},
		{"kex_exchange_identification: read: Connection reset by peer", errs.EHOSTDOWN, ReasonSSHConnect},
		{"", errs.EHOSTDOWN, ReasonSSHFailed},
		{"something new", errs.EHOSTDOWN, ReasonSSHFailed},
	} {
		err := classifySSH("dev", "box", c.said)
		var f *Fault
		if !errors.As(err, &f) || f.Code != c.code || f.Reason() != c.reason || errs.CodeOf(err) != c.code || !strings.Contains(f.Message, c.said) {
			t.Errorf("%q: %v (%+v), want %s/%s", c.said, err, f, c.code, c.reason)
		}
	}
}

// Frames are lines of a kind and a body; one over MaxFrame is skipped
// without being held and the next one is read whole; a frame cut by the
// end of the input is an error, not a frame.
func TestFrameReader(t *testing.T) {
	var in bytes.Buffer
	in.Write(appendFrame(nil, KindHello, []byte(`{"version":1}`)))
	in.WriteString("env " + strings.Repeat("x", MaxFrame+10) + "\n")
	in.Write(appendFrame(nil, KindEnv, []byte(`{"seq":2}`)))
	in.WriteString("ping {}\r\n")
	in.WriteString("env {\"cut\"")
	fr := newFrameReader(&in)
	for i, want := range []struct {
		kind, body string
		err        error
	}{
		{KindHello, `{"version":1}`, nil},
		{KindEnv, "", errFrameSize},
		{KindEnv, `{"seq":2}`, nil},
		{KindPing, `{}`, nil},
		{"", "", io.ErrUnexpectedEOF},
	} {
		kind, body, size, err := fr.next()
		if kind != want.kind || string(body) != want.body || !errors.Is(err, want.err) {
			t.Fatalf("frame %d: %q %q %v, want %q %q %v", i, kind, body, err, want.kind, want.body, want.err)
		}
		if want.err == errFrameSize && size != MaxFrame+15 {
			t.Fatalf("oversized frame of %d bytes", size)
		}
	}
	if _, _, _, err := fr.next(); err != io.EOF {
		t.Fatalf("after the end: %v", err)
	}
}

// What the other side printed reaches a message printable and bounded.
func TestPrintable(t *testing.T) {
	if got := printable([]byte("a\x1b[31mred\x00\nline  two\r")); got != "a [31mred line two" {
		t.Fatalf("%q", got)
	}
	if got := printable(bytes.Repeat([]byte("y"), 2000)); len(got) != 512 || !strings.HasPrefix(got, "...") {
		t.Fatalf("%d bytes", len(got))
	}
}
