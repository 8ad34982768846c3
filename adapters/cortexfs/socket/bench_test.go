package socket

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/debug"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
)

// BenchmarkPing is one ping/pong round trip over the socket.
func BenchmarkPing(b *testing.B) {
	f := start(b, debug.Echo{})
	c := f.dial(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.send(`{"op":"ping"}`)
		if e := c.next(); e.Type != stream.TypePong {
			b.Fatal(e)
		}
	}
}

const benchDeltas, benchDeltaSize = 20000, 64

// BenchmarkDeltaThroughput streams one run of many small deltas through the
// server (frames stored in events.jsonl and written to the client), and the
// same frames through a bare unix socket pair in the same run. Reported:
// deltas/s of each and their ratio (target >= 0.5).
func BenchmarkDeltaThroughput(b *testing.B) {
	fl := &flood{n: benchDeltas, size: benchDeltaSize}
	f := start(b, fl)
	c := f.dial(b)
	raw := rawPair(b)
	var tServer, tRaw time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		c.send(fmt.Sprintf(`{"op":"send","id":"m%d","session":"s%d","input":"go"}`, i, i))
		// Same client work as the raw path: decode each frame, keep none.
		n := 0
		for j := 0; j < benchDeltas+10; j++ {
			e := c.next()
			if e.Type == stream.TypeDelta {
				n++
			}
			if e.Type == stream.TypeDone {
				break
			}
		}
		if n != benchDeltas {
			b.Fatalf("got %d deltas", n)
		}
		tServer += time.Since(t0)
		t0 = time.Now()
		raw()
		tRaw += time.Since(t0)
	}
	b.StopTimer()
	srv := float64(benchDeltas*b.N) / tServer.Seconds()
	base := float64(benchDeltas*b.N) / tRaw.Seconds()
	b.ReportMetric(srv, "server-deltas/s")
	b.ReportMetric(base, "raw-deltas/s")
	b.ReportMetric(srv/base, "x-raw")
}

// rawPair returns a function that copies benchDeltas pre-encoded delta
// frames, one write each, through a unix socket and reads them back as
// JSON lines: the floor of the protocol on this machine.
func rawPair(b *testing.B) func() {
	path := filepath.Join(b.TempDir(), "raw.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	frame, _ := stream.Encode(stream.Event{Type: stream.TypeDelta, ID: "e1", Run: "run-1", Text: fmt.Sprintf("%08d%s", 0, strings.Repeat("x", benchDeltaSize))})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					for i := 0; i < benchDeltas; i++ {
						if _, err := conn.Write(frame); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	conn, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	sc := bufio.NewScanner(conn)
	return func() {
		conn.Write([]byte("go\n"))
		for i := 0; i < benchDeltas; i++ {
			if !sc.Scan() {
				b.Fatal("raw stream ended")
			}
			var e stream.Event
			if err := jsonUnmarshal(sc.Bytes(), &e); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
