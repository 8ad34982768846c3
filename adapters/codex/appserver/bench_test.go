package appserver_test

// Benchmarks against the real pinned Codex (`just bench`): the cost of
// cbth's client and supervisor next to a bare client doing the same calls
// in the same run. The bare client is the least that works: a raw unix
// socket, a fixed WebSocket handshake, unfragmented masked frames, no
// goroutines, no validation.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/codex/appserver"
	"github.com/cbth-dev/cbth/adapters/codex/codextest"
	"github.com/cbth-dev/cbth/adapters/codex/supervisor"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/fakeprovider"
)

// bare is the minimal client.
type bare struct {
	conn net.Conn
	r    *bufio.Reader
	id   int
}

func dialBare(path string) (*bare, error) {
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
			return &bare{conn: conn, r: r}, nil
		}
	}
}

func (c *bare) send(payload []byte) error {
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

func (c *bare) recv() ([]byte, error) {
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

// call sends a request and reads until its answer, skipping the rest.
func (c *bare) call(method, params string) ([]byte, error) {
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

const initParams = `{"clientInfo":{"name":"bench","version":"0"},"capabilities":{"experimentalApi":true}}`

// pair times two ways of doing the same thing, alternating which goes
// first, so both see the same machine load; it reports each one's median
// in ms and the ratio of the medians.
func pair(b *testing.B, names [2]string, do [2]func() time.Duration) {
	var d [2][]time.Duration
	i := 0
	for b.Loop() {
		for k := range 2 {
			j := (i + k) % 2
			d[j] = append(d[j], do[j]())
		}
		i++
	}
	med := func(x []time.Duration) float64 {
		slices.Sort(x)
		return float64(x[len(x)/2]) / float64(time.Millisecond)
	}
	m0, m1 := med(d[0]), med(d[1])
	b.ReportMetric(m0, names[0]+"-ms")
	b.ReportMetric(m1, names[1]+"-ms")
	b.ReportMetric(m0/m1, names[0]+"/"+names[1])
}

// BenchmarkSpawn: a new app-server process until its first initialize is
// answered. cbth: supervisor.Start (which also checks the listener's pid).
// bare: exec, poll connect every 5 ms as the supervisor does, handshake,
// initialize.
func BenchmarkSpawn(b *testing.B) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	defer model.Close()
	cbth := func() time.Duration {
		cfg, _ := codextest.SupervisorConfig(b, model)
		sup, err := supervisor.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := sup.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		sup.Stop(context.Background())
		return d
	}
	bareSpawn := func() time.Duration {
		cfg, _ := codextest.SupervisorConfig(b, model)
		os.MkdirAll(cfg.Dir, 0o700)
		sock := filepath.Join(cfg.Dir, "codex.sock")
		cmd := exec.Command(cfg.Codex, "app-server", "--listen", "unix://"+sock)
		cmd.Env, cmd.Dir = cfg.Env, cfg.Cwd
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		var c *bare
		for deadline := time.Now().Add(30 * time.Second); ; {
			var err error
			if c, err = dialBare(sock); err == nil {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := c.call("initialize", initParams); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		c.conn.Close()
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		return d
	}
	pair(b, [2]string{"cbth", "bare"}, [2]func() time.Duration{cbth, bareSpawn})
}

// BenchmarkSpawnStdio: the native binary against the npm wrapper, each
// spawned on stdio until initialize is answered (why the tests run the
// native binary).
func BenchmarkSpawnStdio(b *testing.B) {
	model := fakeprovider.Start(fakeprovider.Codex, "")
	defer model.Close()
	home := codextest.Home(b, model.BaseURL())
	spawn := func(bin string) func() time.Duration {
		return func() time.Duration {
			cmd := exec.Command(bin, "app-server")
			cmd.Env, cmd.Dir = codextest.Env(b, home), home
			t0 := time.Now()
			tr, err := appserver.StartStdio(cmd)
			if err != nil {
				b.Fatal(err)
			}
			c := appserver.New(tr, appserver.Options{})
			if _, err := c.Initialize(context.Background(), codextest.ClientInfo, appserver.Capabilities{ExperimentalAPI: true}); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			c.Close()
			return d
		}
	}
	wrapper := filepath.Join(codextest.FixtureDir(b), "node_modules", ".bin", "codex")
	pair(b, [2]string{"native", "npm-wrapper"}, [2]func() time.Duration{spawn(codextest.Binary(b)), spawn(wrapper)})
}

// BenchmarkResume: thread/resume of a loaded thread (excludeTurns), one
// round trip, by cbth's client and by the bare one on the same app-server.
func BenchmarkResume(b *testing.B) {
	r := codextest.StartRig(b)
	ctx := context.Background()
	c := r.Inst.Client()
	th, err := c.ThreadStart(ctx, appserver.ThreadStartParams{Cwd: r.Cwd})
	if err != nil {
		b.Fatal(err)
	}
	sub := c.Subscribe()
	if _, err := c.TurnStart(ctx, appserver.TurnStartParams{ThreadID: th.Thread.ID, Input: []appserver.Input{appserver.TextInput("hi")}}); err != nil {
		b.Fatal(err)
	}
	for m := range sub.C() {
		if m.Method == appserver.NoteTurnCompleted {
			break
		}
	}
	sub.Close()
	cc, err := r.Inst.Dial(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	bc, err := dialBare(r.Inst.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer bc.conn.Close()
	if _, err := bc.call("initialize", initParams); err != nil {
		b.Fatal(err)
	}
	params := fmt.Sprintf(`{"threadId":%q,"excludeTurns":true}`, th.Thread.ID)
	pair(b, [2]string{"cbth", "bare"}, [2]func() time.Duration{
		func() time.Duration {
			t0 := time.Now()
			if _, err := cc.ThreadResume(ctx, appserver.ThreadResumeParams{ThreadID: th.Thread.ID, ExcludeTurns: true}); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		},
		func() time.Duration {
			t0 := time.Now()
			if _, err := bc.call("thread/resume", params); err != nil {
				b.Fatal(err)
			}
			return time.Since(t0)
		},
	})
}
