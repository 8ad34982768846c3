package codextest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// Pair times two ways of doing the same thing, alternating which goes
// first, so both see the same machine load; it reports each one's median
// in ms and the ratio of the medians.
func Pair(b *testing.B, names [2]string, do [2]func() time.Duration) {
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

// BareResume dials and initializes a Bare client on sock, closed when b
// ends, and returns one timed thread/resume of thread without its turns
// on it: the bare side of a resume Pair.
func BareResume(b *testing.B, sock, thread string) func() time.Duration {
	bc, err := DialBare(sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bc.Close() })
	if _, err := bc.Call("initialize", InitParams); err != nil {
		b.Fatal(err)
	}
	params := fmt.Sprintf(`{"threadId":%q,"excludeTurns":true}`, thread)
	return func() time.Duration {
		t0 := time.Now()
		if _, err := bc.Call("thread/resume", params); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
}

// SpawnBare starts `bin app-server` on a socket in dir with env, as a bare
// client would: it polls the socket every 5 ms (as the supervisor does),
// handshakes and initializes, then stops the process. It returns the time
// from spawn to the answer to initialize.
func SpawnBare(b *testing.B, bin string, env []string, dir string) time.Duration {
	sock := filepath.Join(dir, "codex.sock")
	cmd := exec.Command(bin, "app-server", "--listen", "unix://"+sock)
	cmd.Env, cmd.Dir = env, dir
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var c *Bare
	for deadline := time.Now().Add(30 * time.Second); ; {
		var err error
		if c, err = DialBare(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := c.Call("initialize", InitParams); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	c.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	return d
}
