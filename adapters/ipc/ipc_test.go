package ipc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/engine/errs"
)

func serve(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &Server{Version: "test", Log: slog.New(slog.DiscardHandler), UID: os.Getuid(),
		Handler: func(ctx context.Context, r *Request) (any, error) {
			if r.Op == "echo" {
				return map[string]int{"args": len(r.Args)}, nil
			}
			return nil, errs.New(errs.EINVAL, "unknown op %q", r.Op)
		}}
	done := make(chan struct{})
	go func() { srv.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return path
}

// A frame of exactly 1 MiB (newline included) is served; one byte more is
// refused with EMSGSIZE.
func TestFrameLimit(t *testing.T) {
	path := serve(t)
	frame := func(total int) []byte {
		head := `{"proto":1,"id":1,"op":"echo","args":"`
		tail := `"}` + "\n"
		return []byte(head + strings.Repeat("x", total-len(head)-len(tail)) + tail)
	}
	for _, tc := range []struct {
		size int
		code errs.Code
	}{{MaxFrame, ""}, {MaxFrame + 1, errs.EMSGSIZE}} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		f := frame(tc.size)
		if len(f) != tc.size {
			t.Fatalf("built a %d byte frame, want %d", len(f), tc.size)
		}
		go c.Write(f)
		line, err := bufio.NewReader(c).ReadBytes('\n')
		c.Close()
		if err != nil {
			t.Fatalf("size %d: %v", tc.size, err)
		}
		var resp Response
		if err := json.Unmarshal(line, &resp); err != nil {
			t.Fatal(err)
		}
		got := errs.Code("")
		if resp.Error != nil {
			got = resp.Error.Code
		}
		if got != tc.code || resp.OK != (tc.code == "") {
			t.Fatalf("frame of %d bytes: ok=%v code=%q, want %q", tc.size, resp.OK, got, tc.code)
		}
	}
}

// Bad frames get a stable code and the connection goes on serving.
func TestBadFramesAndVersion(t *testing.T) {
	path := serve(t)
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	send := func(s string) Response {
		c.Write([]byte(s + "\n"))
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var resp Response
		json.Unmarshal(line, &resp)
		return resp
	}
	if resp := send(`{not json`); resp.Error == nil || resp.Error.Code != errs.EINVAL {
		t.Fatalf("malformed frame: %+v", resp)
	}
	if resp := send(`{"proto":1,"id":2,"op":"nope"}`); resp.Error == nil || resp.Error.Code != errs.EINVAL || resp.ID != 2 {
		t.Fatalf("unknown op: %+v", resp)
	}
	if resp := send(`{"proto":1,"id":3,"op":"echo","future_field":true}`); !resp.OK || resp.Daemon != "test" {
		t.Fatalf("unknown field not ignored: %+v", resp)
	}
	if resp := send(`{"proto":99,"id":4,"op":"echo"}`); resp.Error == nil || resp.Error.Code != errs.EVERSION {
		t.Fatalf("protocol mismatch: %+v", resp)
	}
}

// FuzzReadFrame: any byte stream yields frames no longer than MaxFrame and
// never panics.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte("{\"proto\":1}\n{}\n"))
	f.Add(bytes.Repeat([]byte("a"), 5000))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(b), 16)
		for {
			line, err := readFrame(r)
			if len(line) > MaxFrame {
				t.Fatalf("frame of %d bytes", len(line))
			}
			if err != nil {
				return
			}
			var req Request
			_ = json.Unmarshal(line, &req)
		}
	})
}
