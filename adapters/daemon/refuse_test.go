package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/internal/errs"
)

// A daemon will not serve a log it cannot trust: started on a file that
// is no log, it stops with ECORRUPT and says how to recover (restore a
// backup, or reinit the home), leaving the file as it was.
func TestRunRefusesADamagedLog(t *testing.T) {
	h := home.Home{Root: filepath.Join(t.TempDir(), "home")}
	if err := h.Ensure(); err != nil {
		t.Fatal(err)
	}
	garbage := bytes.Repeat([]byte("not a bbolt file "), 1024)
	if err := os.WriteFile(h.DB(), garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	err := daemon.Run(context.Background(), daemon.Options{Home: h, Config: config(), Clock: engine.NewManualClock(t0), Manual: true, NoSync: true,
		Version: "test", Log: slog.New(slog.DiscardHandler), Modules: modules()})
	if errs.CodeOf(err) != errs.ECORRUPT || !strings.Contains(err.Error(), "cbth home reinit") || !strings.Contains(err.Error(), h.DB()) {
		t.Fatalf("a damaged log: %v", err)
	}
	if b, _ := os.ReadFile(h.DB()); !bytes.Equal(b, garbage) {
		t.Fatal("the refused file was changed")
	}
}

// One daemon per home: a second one on a home whose daemon runs stops at
// once with ErrRunning (EBUSY), and the first goes on serving.
func TestASecondDaemonIsRefused(t *testing.T) {
	root := filepath.Join(t.TempDir(), "home")
	r := start(t, root)
	err := daemon.Run(context.Background(), daemon.Options{Home: home.Home{Root: root}, Config: config(), Clock: engine.NewManualClock(t0), Manual: true,
		Version: "test", Log: slog.New(slog.DiscardHandler), Modules: modules()})
	if !errors.Is(err, daemon.ErrRunning) || errs.CodeOf(err) != errs.EBUSY {
		t.Fatalf("a second daemon: %v", err)
	}
	if st := call(r, api.DaemonStatus, api.Empty{}); st.PID != os.Getpid() {
		t.Fatalf("the first daemon after the second was refused: %+v", st)
	}
}
