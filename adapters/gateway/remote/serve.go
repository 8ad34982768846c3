package remote

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/cbth-dev/cbth/adapters/gateway"
	"github.com/cbth-dev/cbth/adapters/gateway/envelope"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Heartbeat bounds: what the local end asks for is kept between them.
const (
	minHeartbeat     = 50 * time.Millisecond
	maxHeartbeat     = time.Minute
	defaultHeartbeat = 10 * time.Second
)

// ServeOptions are the remote end's settings.
type ServeOptions struct {
	// Version is this cbth's version, for the hello.
	Version string
	// Now stamps the refusals the relay writes itself.
	Now func() time.Time
}

// out serializes frames to the local end: answers and heartbeats.
type out struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func (o *out) frame(kind string, body []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = appendFrame(o.buf[:0], kind, body)
	_, err := o.w.Write(o.buf)
	if cap(o.buf) > 64<<10 {
		o.buf = nil // do not keep a large answer's buffer for good
	}
	return err
}

func (o *out) json(kind string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return errs.Wrap(errs.EINTERNAL, err, "encode a %s frame", kind)
	}
	return o.frame(kind, b)
}

// WriteFault sends a fault that ends the link (an err frame): what the
// remote end says when it cannot serve at all, such as when its own
// daemon cannot be reached.
func WriteFault(w io.Writer, err error) error {
	f := &Fault{Code: errs.CodeOf(err), Message: err.Error()}
	var rf *Fault
	if errors.As(err, &rf) {
		f = rf
	}
	_, werr := w.Write(jsonFrame(KindErr, f))
	return werr
}

// Serve is the remote end of a link: `cbth gateway serve --stdio`, run by
// sshd for the local gateway. It writes its hello, checks the local's,
// then passes each envelope frame from in to this machine's own gateway
// (gw, a connection to its gateway socket), which validates, routes and
// records it as it does any client's, and passes back as frames
// everything the gateway writes, with a heartbeat in between. It returns
// when in ends (the local closed the link, or ssh died) or the gateway
// closes the connection; gw is closed then.
func Serve(in io.Reader, w io.Writer, gw net.Conn, opt ServeOptions) error {
	defer gw.Close()
	if opt.Now == nil {
		opt.Now = time.Now
	}
	o := &out{w: w}
	if err := o.json(KindHello, Hello{Protocol: Protocol, Version: Version, MaxFrame: MaxFrame, CBTH: opt.Version}); err != nil {
		return errs.Wrap(errs.EHOSTDOWN, err, "write the hello")
	}
	fr := newFrameReader(in)
	hb, err := readHello(fr)
	if err != nil {
		var f *Fault
		if errors.As(err, &f) {
			_ = o.json(KindErr, f)
		}
		return err
	}
	beat := time.Duration(hb.HeartbeatMS) * time.Millisecond
	switch {
	case beat == 0:
		beat = defaultHeartbeat
	case beat < minHeartbeat:
		beat = minHeartbeat
	case beat > maxHeartbeat:
		beat = maxHeartbeat
	}

	upDone := make(chan error, 1)
	go func() { upDone <- up(gw, o) }()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(beat)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if o.frame(KindPing, []byte("{}")) != nil {
					return
				}
			}
		}
	}()
	downDone := make(chan error, 1)
	go func() { downDone <- down(fr, gw, o, opt.Now) }()
	select {
	case err := <-upDone:
		// The gateway closed the connection (it refused the peer, or its
		// daemon stops), or the local end stopped reading: nothing more
		// can pass.
		return err
	case err := <-downDone:
		// The local end closed the link, or ssh died: nobody reads what
		// the gateway would still say. Closing the connection ends what
		// it was doing for this link; what it did not acknowledge, the
		// local end sends again.
		return err
	}
}

// readHello reads the local end's hello and checks it speaks this
// protocol and version.
func readHello(fr *frameReader) (Hello, error) {
	var h Hello
	kind, body, _, err := fr.next()
	if err != nil {
		if err == io.EOF {
			return h, errs.Wrap(errs.EHOSTDOWN, err, "the local end closed the link before its hello")
		}
		return h, fault(errs.EINVAL, ReasonProtocol, "the first frame is not a hello: %v", err)
	}
	if kind != KindHello || json.Unmarshal(body, &h) != nil {
		return h, fault(errs.EINVAL, ReasonProtocol, "the first frame is not a hello of %s", Protocol)
	}
	if h.Protocol != Protocol || h.Version != Version {
		return h, fault(errs.EVERSION, ReasonVersion, "the local cbth speaks %s version %d, this one %s version %d: run the same cbth version on both machines",
			h.Protocol, h.Version, Protocol, Version)
	}
	return h, nil
}

// down passes envelope frames from the local end to the gateway, one
// line each. A frame over the limit never reaches the gateway: the relay
// refuses it itself, as the gateway would (EMSGSIZE).
func down(fr *frameReader, gw net.Conn, o *out, now func() time.Time) error {
	var line []byte
	for {
		kind, body, size, err := fr.next()
		switch {
		case errors.Is(err, errFrameSize):
			ref := gateway.Refusal(now(), &envelope.Rejection{Code: errs.EMSGSIZE, Rule: envelope.RuleFrameSize,
				Message: "a frame of " + strconv.Itoa(size) + " bytes is over the link's limit"})
			b, _ := envelope.Encode(ref)
			if err := o.frame(KindEnv, trimNL(b)); err != nil {
				return errs.Wrap(errs.EHOSTDOWN, err, "write to the local end")
			}
			continue
		case err == io.EOF:
			return nil
		case err != nil:
			return errs.Wrap(errs.EHOSTDOWN, err, "read from the local end")
		}
		if kind != KindEnv {
			continue // a heartbeat or a kind of a later version: nothing to pass on
		}
		line = append(append(line[:0], body...), '\n')
		if _, err := gw.Write(line); err != nil {
			return errs.Wrap(errs.EHOSTDOWN, err, "write to the gateway")
		}
		if cap(line) > 64<<10 {
			line = nil
		}
	}
}

// up passes every line the gateway writes to the local end as an env
// frame. A line over the frame limit is not sent; a drop frame says so.
func up(gw net.Conn, o *out) error {
	r := bufio.NewReaderSize(gw, MaxFrame-len(KindEnv)-2)
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			n := len(line)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = r.ReadSlice('\n')
				n += len(line)
			}
			if werr := o.json(KindDrop, fault(errs.EMSGSIZE, envelope.RuleFrameSize, "an envelope of %d bytes is over the link's frame limit", n)); werr != nil {
				return errs.Wrap(errs.EHOSTDOWN, werr, "write to the local end")
			}
			if err != nil {
				return nil
			}
			continue
		}
		if err != nil {
			if err == io.EOF || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return errs.Wrap(errs.EHOSTDOWN, err, "read from the gateway")
		}
		if err := o.frame(KindEnv, trimNL(line)); err != nil {
			return errs.Wrap(errs.EHOSTDOWN, err, "write to the local end")
		}
	}
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
