package daemon_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/adapters/ipc"
	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/internal/errs"
)

// The Desktop writeback operations came with protocol 5: a client of 4
// asking for any of them gets the stable EVERSION (which the CLI turns
// into "run cbth daemon restart"), the same answer a daemon of 4 gives a
// client of 5, never the EINVAL of an unknown operation, which a bridge
// could read as a refused CAS. Raw frames on the real socket of a real
// daemon.
func TestDesktopWritebackOpsNeedProtocol5(t *testing.T) {
	if ipc.Proto < 5 {
		t.Fatalf("protocol %d: the Desktop writeback operations need 5", ipc.Proto)
	}
	ops := []string{api.DesktopNoteArmPending.Name, api.DesktopNoteArm.Name, api.DesktopNotePaused.Name,
		api.DesktopNoteBoundaryCrossed.Name, api.DesktopRelayMarkerIssue.Name, api.DesktopRelayScannerBind.Name,
		api.DesktopRelayConsume.Name, api.DesktopReadArtifact.Name, api.DesktopRevokeLease.Name}
	for _, op := range ops {
		if !slices.Contains(api.All, op) {
			t.Errorf("%s is not declared in api.All", op)
		}
	}
	r := start(t, filepath.Join(t.TempDir(), "home"))
	send := func(proto int, op string) ipc.Response {
		t.Helper()
		// The daemon closes a connection after a version refusal: one
		// connection per frame.
		c, err := net.Dial("unix", home.Home{Root: r.root}.Socket())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, `{"proto":%d,"client":"old","id":7,"op":%q,"args":{}}`+"\n", proto, op)
		line, err := bufio.NewReader(c).ReadBytes('\n')
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		var resp ipc.Response
		if err := json.Unmarshal(line, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, op := range ops {
		for _, proto := range []int{4, ipc.Proto - 1, ipc.Proto + 1} {
			resp := send(proto, op)
			if resp.OK || resp.Error == nil || resp.Error.Code != errs.EVERSION || resp.Proto != ipc.Proto {
				t.Errorf("%s at protocol %d: %+v, want EVERSION from protocol %d", op, proto, resp, ipc.Proto)
			}
		}
	}
	// Contrast: at the daemon's protocol an unknown name is EINVAL.
	if resp := send(ipc.Proto, "desktop.no_such_op"); resp.Error == nil || resp.Error.Code != errs.EINVAL {
		t.Errorf("unknown op at protocol %d: %+v", ipc.Proto, resp)
	}
}
