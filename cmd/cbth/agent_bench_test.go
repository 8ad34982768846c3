package main_test

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"
)

// BenchmarkAgentSessionTurn times one durable agent turn with one tool
// call over agent/coder.sock, served by the daemon: the user message, the
// debug model asking for fs.read, the read inside the root, the second
// model call, every frame and message recorded as ctxsession events and
// projected into the session directory and index, until done. Measured
// in the same run: the same turn without a tool on a session=socket model
// (model-turn-ms) and the bare `model/debug/echo "hello"` exec
// (echo-exec-ms). Reported: medians and agent-turn / echo-exec.
func BenchmarkAgentSessionTurn(b *testing.B) {
	dir := b.TempDir()
	home := filepath.Join(dir, "home")
	env := append(os.Environ(), "CBTH_HOME="+home, "HOME="+dir)
	cbth := func(args ...string) {
		c := exec.Command(cbthBin, args...)
		c.Env = env
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("cbth %v: %v\n%s", args, err, out)
		}
	}
	runner := filepath.Join(dir, "cortexfs-object-runner")
	os.Symlink(cbthBin, runner)
	proj := filepath.Join(dir, "proj")
	os.MkdirAll(proj, 0o700)
	os.WriteFile(filepath.Join(proj, "README.md"), []byte("hello from the readme\n"), 0o600)
	cbth("ctx", "init", "--runner", runner)
	cbth("model", "add", "local/chat", "--driver", "debug", "--id", "echo", "--session", "socket")
	cbth("agent", "add", "coder", "--model", "debug/echo", "--tool", "fs.read", "--root", proj)
	defer cbth("daemon", "stop")
	ctx := filepath.Join(home, "ctx")
	dial := func(path string) (net.Conn, *bufio.Reader) {
		for i := 0; i < 200; i++ {
			if c, err := net.Dial("unix", path); err == nil {
				return c, bufio.NewReader(c)
			}
			time.Sleep(50 * time.Millisecond)
		}
		b.Fatalf("%s never served", path)
		return nil, nil
	}
	agent, ar := dial(filepath.Join(ctx, "agent", "coder.sock"))
	defer agent.Close()
	model, mr := dial(filepath.Join(ctx, "model", "local", "chat.sock"))
	defer model.Close()
	turn := func(c net.Conn, r *bufio.Reader, id, input string) time.Duration {
		req, _ := json.Marshal(map[string]string{"op": "send", "id": id, "session": "bench", "input": input})
		t0 := time.Now()
		c.Write(append(req, '\n'))
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				b.Fatal(err)
			}
			var f struct{ Type, Status string }
			json.Unmarshal(line, &f)
			if f.Type == "done" {
				if f.Status != "ok" {
					b.Fatalf("turn %s: %s", id, line)
				}
				return time.Since(t0)
			}
			if f.Type == "error" {
				b.Fatalf("turn %s: %s", id, line)
			}
		}
	}
	echo := filepath.Join(ctx, "model", "debug", "echo")
	exe := func() time.Duration {
		c := exec.Command(echo, "hello")
		c.Env = env
		t0 := time.Now()
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("echo: %v\n%s", err, out)
		}
		return time.Since(t0)
	}
	task := `!tool fs.read {"path":"README.md"}`
	for i := 0; i < 3; i++ {
		turn(agent, ar, "warm"+strconv.Itoa(i), task)
		turn(model, mr, "warm"+strconv.Itoa(i), "hello")
		exe()
	}
	var at, mt, et []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		at = append(at, turn(agent, ar, "m"+strconv.Itoa(i), task))
		mt = append(mt, turn(model, mr, "m"+strconv.Itoa(i), "hello"))
		et = append(et, exe())
	}
	b.StopTimer()
	med := func(d []time.Duration) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	ma, mm, me := med(at), med(mt), med(et)
	b.ReportMetric(float64(ma.Microseconds())/1000, "agent-turn-ms")
	b.ReportMetric(float64(mm.Microseconds())/1000, "model-turn-ms")
	b.ReportMetric(float64(me.Microseconds())/1000, "echo-exec-ms")
	b.ReportMetric(float64(ma)/float64(me), "x-echo-exec")
}
