package codextest

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
)

// InitParams are initialize's params for a Bare client.
const InitParams = `{"clientInfo":{"name":"bench","version":"0"},"capabilities":{"experimentalApi":true}}`

// Bare is the least client of the app-server that works, for benchmarks
// to hold cbth's against: a raw unix socket, a fixed WebSocket handshake,
// unfragmented masked frames, no goroutines, no validation.
type Bare struct {
	conn net.Conn
	r    *bufio.Reader
	id   int
}

func DialBare(path string) (*Bare, error) {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	key := make([]byte, 16)
	rand.Read(key)
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", base64.StdEncoding.EncodeToString(key))
	r := bufio.NewReader(conn)
	status, err := r.ReadString('\n')
	if err != nil || !strings.Contains(status, " 101 ") {
		conn.Close()
		return nil, fmt.Errorf("upgrade: %q %v", status, err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			conn.Close()
			return nil, err
		}
		if line == "\r\n" {
			return &Bare{conn: conn, r: r}, nil
		}
	}
}

func (c *Bare) send(payload []byte) error {
	hdr := []byte{0x81}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n < 1<<16:
		hdr = append(hdr, 0x80|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	mask := []byte{1, 2, 3, 4}
	frame := append(append(hdr, mask...), payload...)
	for i := range payload {
		frame[len(hdr)+4+i] ^= mask[i%4]
	}
	_, err := c.conn.Write(frame)
	return err
}

func (c *Bare) recv() ([]byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(c.r, b[:]); err != nil {
			return nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(c.r, b[:]); err != nil {
			return nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	p := make([]byte, n)
	_, err := io.ReadFull(c.r, p)
	return p, err
}

// Call sends a request and reads until its answer, skipping the rest.
func (c *Bare) Call(method, params string) ([]byte, error) {
	c.id++
	if err := c.send(fmt.Appendf(nil, `{"id":%d,"method":%q,"params":%s}`, c.id, method, params)); err != nil {
		return nil, err
	}
	for {
		p, err := c.recv()
		if err != nil {
			return nil, err
		}
		var m struct {
			ID    *int            `json:"id"`
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(p, &m) == nil && m.ID != nil && *m.ID == c.id {
			if m.Error != nil {
				return nil, fmt.Errorf("%s: %s", method, m.Error)
			}
			return p, nil
		}
	}
}

// Close closes the connection.
func (c *Bare) Close() error { return c.conn.Close() }
