package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/debug"
	"github.com/cbth-dev/cbth/adapters/cortexfs/session"
	"github.com/cbth-dev/cbth/adapters/cortexfs/socket"
	"github.com/cbth-dev/cbth/adapters/gateway"
	"github.com/cbth-dev/cbth/engine"
	gatewaycmd "github.com/cbth-dev/cbth/engine/command/gateway"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/sockfile"
	"github.com/cbth-dev/cbth/projections"
)

// fixture is a gateway in process: a log, a debug echo model served on
// its socket under a ctx root, a route to it, the gateway socket.
type fixture struct {
	gwSock, modelSock string
}

func startGateway(tb testing.TB, noSync bool) fixture {
	tb.Helper()
	dir := tb.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	eng, err := engine.Open(filepath.Join(dir, "cbth.db"), engine.Options{Projections: projections.Store{}, NoSync: noSync})
	if err != nil {
		tb.Fatal(err)
	}
	root := filepath.Join(dir, "ctx")
	if err := os.MkdirAll(filepath.Join(root, "model", "debug"), 0o700); err != nil {
		tb.Fatal(err)
	}
	var n atomic.Int64
	store := &session.Files{Dir: filepath.Join(root, "home", "1", "model", "debug", "echo.d", "session"), Model: "debug/echo"}
	srv := &socket.Server{Request: driver.Request{Model: "debug/echo", Provider: "debug", NativeID: "echo"}, Driver: debug.Echo{},
		Store: store, UID: os.Getuid(), NewRunID: func() string { return fmt.Sprintf("run-%d", n.Add(1)) }}
	ln, err := socket.Listen(filepath.Join(root, "model", "debug", "echo.sock"))
	if err != nil {
		tb.Fatal(err)
	}
	served := make(chan struct{}, 2)
	go func() { _ = srv.Serve(ctx, ln); served <- struct{}{} }()
	if _, err := eng.Execute(ctx, engine.Meta{Actor: events.ActorOperator},
		gatewaycmd.AddRoute{WorkspaceID: "w", AgentID: "a", To: "ctx:model/debug/echo", Target: "ctx"}); err != nil {
		tb.Fatal(err)
	}
	gw := &gateway.Gateway{Eng: eng, CtxRoot: root, Agents: gateway.SocketAgents{}, UID: os.Getuid()}
	path := filepath.Join(dir, "gateway.sock")
	gln, err := sockfile.Listen(path)
	if err != nil {
		tb.Fatal(err)
	}
	go func() { _ = gw.Serve(ctx, gln); served <- struct{}{} }()
	tb.Cleanup(func() {
		cancel()
		<-served
		<-served
		store.Close()
		eng.Close()
	})
	return fixture{gwSock: path, modelSock: filepath.Join(root, "model", "debug", "echo.sock")}
}

func envelopeLine(seq int) []byte {
	b, _ := json.Marshal(map[string]any{"channel_type": "dialog", "session_id": "s", "stream_id": "bench", "seq": seq,
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "correlation_id": "c", "target": "bench", "event_type": "message",
		"workspace_id": "w", "agent_id": "a", "payload": map[string]string{"text": fmt.Sprintf("hello %d", seq)}})
	return append(b, '\n')
}

type answer struct {
	Target     string `json:"target"`
	EventType  string `json:"event_type"`
	StatusCode string `json:"status_code"`
}

// BenchmarkGatewayDialogRoundTrip sends dialog messages one at a time
// through the gateway socket to the debug echo model's socket session,
// reading every answer until the gateway's acknowledgement, and the same
// envelopes through a bare unix-socket echo in the same run (the floor:
// one line out, one line back, the same decoding). Reported: envelopes
// per second of each and the ratio. "fsync" is the daemon's setting;
// "nosync" shows what is left when the log's fsync is taken away.
func BenchmarkGatewayDialogRoundTrip(b *testing.B) {
	for _, mode := range []string{"fsync", "nosync"} {
		b.Run(mode, func(b *testing.B) {
			f := startGateway(b, mode == "nosync")
			gc, err := net.Dial("unix", f.gwSock)
			if err != nil {
				b.Fatal(err)
			}
			defer gc.Close()
			gr := bufio.NewReader(gc)
			echo := rawEcho(b)
			var tGW, tRaw, tDirect time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				line := envelopeLine(i + 1)
				t0 := time.Now()
				if _, err := gc.Write(line); err != nil {
					b.Fatal(err)
				}
				for {
					l, err := gr.ReadBytes('\n')
					if err != nil {
						b.Fatal(err)
					}
					var a answer
					if err := json.Unmarshal(l, &a); err != nil {
						b.Fatal(err)
					}
					if a.Target == gateway.TargetGateway {
						if a.StatusCode != "routed" {
							b.Fatalf("answer %s", l)
						}
						break
					}
				}
				tGW += time.Since(t0)
				t0 = time.Now()
				echo(line)
				tRaw += time.Since(t0)
				t0 = time.Now()
				directTurn(b, f.modelSock, i)
				tDirect += time.Since(t0)
			}
			b.StopTimer()
			gwRate := float64(b.N) / tGW.Seconds()
			rawRate := float64(b.N) / tRaw.Seconds()
			directRate := float64(b.N) / tDirect.Seconds()
			b.ReportMetric(gwRate, "gateway-env/s")
			b.ReportMetric(rawRate, "raw-echo-env/s")
			b.ReportMetric(gwRate/rawRate, "x-raw")
			b.ReportMetric(directRate, "direct-turn/s")
			b.ReportMetric(gwRate/directRate, "x-direct")
		})
	}
}

// directTurn is the same turn straight on the model socket, as the
// gateway makes it (a connection per turn, a send, frames until done):
// what the destination itself costs.
func directTurn(b *testing.B, sock string, i int) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req, _ := json.Marshal(map[string]string{"op": "send", "id": fmt.Sprintf("direct-%d", i), "session": "direct", "input": fmt.Sprintf("hello %d", i)})
	c.Write(append(req, '\n'))
	r := bufio.NewReader(c)
	for {
		l, err := r.ReadBytes('\n')
		if err != nil {
			b.Fatal(err)
		}
		var e struct{ Type string }
		json.Unmarshal(l, &e)
		if e.Type == "done" {
			return
		}
	}
}

// rawEcho returns a function that sends one line through a bare unix
// socket echo server and decodes the line that comes back.
func rawEcho(b *testing.B) func([]byte) {
	path := filepath.Join(b.TempDir(), "echo.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		for {
			l, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			if _, err := conn.Write(l); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	return func(line []byte) {
		if _, err := c.Write(line); err != nil {
			b.Fatal(err)
		}
		l, err := r.ReadBytes('\n')
		if err != nil {
			b.Fatal(err)
		}
		var a answer
		if err := json.Unmarshal(l, &a); err != nil {
			b.Fatal(err)
		}
	}
}

// The in-process fixture routes a message and refuses a malformed line
// on the same connection, which stays usable.
func TestGatewayInProcess(t *testing.T) {
	f := startGateway(t, true)
	c, err := net.Dial("unix", f.gwSock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	read := func() answer {
		l, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var a answer
		json.Unmarshal(l, &a)
		return a
	}
	c.Write([]byte("{\"seq\":\n"))
	if a := read(); a.Target != gateway.TargetGateway || a.EventType != "error" {
		t.Fatalf("malformed: %+v", a)
	}
	c.Write(envelopeLine(1))
	var msgs int
	for {
		a := read()
		if a.Target == gateway.TargetGateway {
			if a.StatusCode != "routed" || msgs == 0 {
				t.Fatalf("ack %+v after %d messages", a, msgs)
			}
			break
		}
		if a.EventType == "message" {
			msgs++
		}
	}
	if fi, err := os.Stat(f.gwSock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("gateway socket mode %v %v", fi.Mode(), err)
	}
}
