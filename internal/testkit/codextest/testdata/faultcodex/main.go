// Command faultcodex stands in for the codex executable where a test
// needs the real Codex with a fault on the app-server's socket: it runs
// the real binary and, for `app-server --listen unix://PATH`, sits on
// PATH itself as a small WebSocket proxy to the real app-server, which it
// starts on PATH.real. The kernel then reports faultcodex as the
// listener, the process cbth's supervisor started. Every other
// invocation (--version, the schema, the TUI, exec) is the real binary.
//
// The real binary's path is in the file EXE.real beside the executable
// (EXE is faultcodex's own path). Faults are read from EXE.faults.json
// before every client message, a JSON list of rules:
//
//	{"method":"turn/start","action":"error","code":-32001,"message":"...","count":1}
//	{"method":"turn/start","action":"drop_response","count":1}
//
// "error" answers the request with that JSON-RPC error and never forwards
// it; "drop_request" neither forwards nor answers it; "drop_response"
// forwards it and drops the server's answer; "trace"
// forwards it and logs "trace METHOD UNIXNANO THREADID" as it arrives;
// "disconnect" forwards it and its answer, then closes that client's
// connection after 300 ms and makes every new connection wait 3 s before
// it reaches the real app-server (what the server sends meanwhile is
// lost to that client, as in a brief network loss). A rule
// applies count times (its count is written back decremented). Every
// fault applied is appended as a line to EXE.faults.log.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/coder/websocket"
)

func main() {
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	b, err := os.ReadFile(self + ".real")
	if err != nil {
		fail(err)
	}
	real := strings.TrimSpace(string(b))
	path := listenPath(os.Args[1:])
	if path == "" {
		if err := syscall.Exec(real, append([]string{real}, os.Args[1:]...), os.Environ()); err != nil {
			fail(err)
		}
	}
	os.Exit(proxy(self, real, path))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "faultcodex:", err)
	os.Exit(70)
}

// listenPath is PATH of `app-server --listen unix://PATH`, else "".
func listenPath(args []string) string {
	if len(args) == 0 || args[0] != "app-server" {
		return ""
	}
	for i, a := range args {
		if a == "--listen" && i+1 < len(args) && strings.HasPrefix(args[i+1], "unix://") {
			return strings.TrimPrefix(args[i+1], "unix://")
		}
	}
	return ""
}

func proxy(self, real, path string) int {
	args := append([]string{}, os.Args[1:]...)
	for i, a := range args {
		if a == "unix://"+path {
			args[i] = "unix://" + path + ".real"
		}
	}
	child := exec.Command(real, args...)
	child.Stdout, child.Stderr, child.Env = os.Stdout, os.Stderr, os.Environ()
	if err := child.Start(); err != nil {
		fail(err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for s := range sigs {
			child.Process.Signal(s)
		}
	}()
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		child.Process.Kill()
		fail(err)
	}
	f := &faults{rules: self + ".faults.json", log: self + ".faults.log"}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.SetReadLimit(appserver.MaxMessage)
		f.serve(r.Context(), c, path+".real")
	})}
	go srv.Serve(ln)
	err = child.Wait()
	ln.Close()
	os.Remove(path)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 0
}

type rule struct {
	Method  string `json:"method"`
	Action  string `json:"action"`
	Code    int    `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Count   int    `json:"count"`
}

type faults struct {
	mu         sync.Mutex
	rules, log string
	blackout   time.Time // new connections wait until then
}

// take returns the rule that applies to method now, consuming one count.
func (f *faults) take(method string) *rule {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.rules)
	if err != nil {
		return nil
	}
	var rules []rule
	if json.Unmarshal(b, &rules) != nil {
		return nil
	}
	for i := range rules {
		if rules[i].Method == method && rules[i].Count > 0 {
			rules[i].Count--
			out, _ := json.Marshal(rules)
			tmp := f.rules + ".tmp"
			if os.WriteFile(tmp, out, 0o600) == nil {
				os.Rename(tmp, f.rules)
			}
			r := rules[i]
			return &r
		}
	}
	return nil
}

func (f *faults) note(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, err := os.OpenFile(f.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return
	}
	defer l.Close()
	fmt.Fprintf(l, format+"\n", args...)
}

// serve pipes one client connection to a new connection to the real
// app-server, applying the faults.
func (f *faults) serve(ctx context.Context, c *websocket.Conn, real string) {
	defer c.CloseNow()
	f.mu.Lock()
	wait := time.Until(f.blackout)
	f.mu.Unlock()
	if wait > 0 {
		time.Sleep(wait)
	}
	var up appserver.Transport
	for i := 0; ; i++ {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		var err error
		up, _, err = appserver.DialUnix(dctx, real)
		cancel()
		if err == nil {
			break
		}
		if i > 300 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer up.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	dropped := map[string]bool{} // ids whose answers are dropped
	write := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		return c.Write(ctx, websocket.MessageText, b)
	}
	go func() {
		defer cancel()
		for {
			b, err := up.Read(ctx)
			if err != nil {
				return
			}
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(b, &m) == nil && m.Method == "" && len(m.ID) > 0 {
				mu.Lock()
				drop := dropped[string(m.ID)]
				delete(dropped, string(m.ID))
				mu.Unlock()
				if drop {
					f.note("dropped the answer to request %s", m.ID)
					continue
				}
			}
			if write(b) != nil {
				return
			}
		}
	}()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(b, &m) == nil && m.Method != "" && len(m.ID) > 0 {
			if r := f.take(m.Method); r != nil {
				switch r.Action {
				case "error":
					ans, _ := json.Marshal(map[string]any{"id": m.ID, "error": map[string]any{"code": r.Code, "message": r.Message}})
					f.note("answered %s %s with %d", m.Method, m.ID, r.Code)
					if write(ans) != nil {
						return
					}
					continue
				case "trace":
					var q struct {
						Params struct {
							ThreadID string `json:"threadId"`
						} `json:"params"`
					}
					json.Unmarshal(b, &q)
					f.note("trace %s %d %s", m.Method, time.Now().UnixNano(), q.Params.ThreadID)
				case "drop_request":
					f.note("dropped request %s %s", m.Method, m.ID)
					continue
				case "disconnect":
					f.mu.Lock()
					f.blackout = time.Now().Add(3 * time.Second)
					f.mu.Unlock()
					f.note("disconnecting after %s %s", m.Method, m.ID)
					go func() {
						time.Sleep(300 * time.Millisecond)
						c.CloseNow()
					}()
				case "drop_response":
					mu.Lock()
					dropped[string(m.ID)] = true
					mu.Unlock()
				}
			}
		}
		if up.Write(ctx, b) != nil {
			return
		}
	}
}
