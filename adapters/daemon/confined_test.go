package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/confine"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The test binary is the confinement wrapper when started under its
// name, and a client of the daemon when asked to be.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == confine.ProgramName {
		os.Exit(confine.Main(os.Args[1:]))
	}
	if sock := os.Getenv("DAEMON_TEST_CLIENT"); sock != "" {
		c, err := ipc.Dial(sock, "test")
		if err == nil {
			_, err = api.Ping.Call(c, api.Empty{})
			c.Close()
		}
		if err != nil {
			fmt.Println("refused:", errs.CodeOf(err), err)
		} else {
			fmt.Println("served")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hostOf is a module that keeps the daemon's host, for a test to run
// what the daemon's own modules run.
type hostOf struct {
	daemon.Base
	h *daemon.Host
}

func (*hostOf) Name() string                                    { return "test-host" }
func (*hostOf) Ops(api.Table)                                   {}
func (m *hostOf) Start(_ context.Context, h *daemon.Host) error { m.h = h; return nil }

// The daemon serves no process of a program it runs confined, even one
// that reaches its socket (as a program confined where unix sockets are
// not, Landlock before ABI 9 without seccomp, could): EACCES, naming
// why, and nothing done. The same program run unconfined is served.
func TestDaemonRefusesWhatItConfined(t *testing.T) {
	root := t.TempDir()
	hm := &hostOf{}
	startWith(t, root, func(o *daemon.Options) { o.Modules = append(o.Modules, hm) })
	sock := home.Home{Root: root}.Socket()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(cmd *exec.Cmd, track bool) string {
		t.Helper()
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if track {
			confine.Started(confine.WithTracker(context.Background(), hm.h.Confined), cmd)
		}
		if err := cmd.Wait(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatal(err)
			}
		}
		return out.String()
	}
	// Unix sockets left to Landlock (a directory named): the program
	// reaches the socket, and the daemon is what refuses it.
	cmd, err := confine.Command(context.Background(), confine.Policy{RW: []string{root}, Unix: []string{root}, Exec: []string{self}},
		nil, []string{self}, []string{"DAEMON_TEST_CLIENT=" + sock})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Args[0] = confine.ProgramName
	if out := run(cmd, true); !strings.Contains(out, "refused: EACCES") || !strings.Contains(out, "runs confined") || !strings.Contains(out, "acts for no confined program") {
		t.Fatalf("a confined program's call: %s", out)
	}
	plain := exec.Command(self)
	plain.Env = []string{"DAEMON_TEST_CLIENT=" + sock}
	if out := run(plain, false); strings.TrimSpace(out) != "served" {
		t.Fatalf("an unconfined client: %s", out)
	}
}
