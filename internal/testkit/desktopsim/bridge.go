package desktopsim

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/cbth-dev/cbth/adapters/ipc/api"
	"github.com/cbth-dev/cbth/projections/inbox"
)

// Bridge plays a Codex Desktop bridge heartbeat: each Wake runs what the
// bridge prompt runs, every helper inside the sandbox.
type Bridge struct {
	Bin      string // the cbth binary
	Home     string // CBTH_HOME
	ThreadID string // the bridge thread
	Sandbox  Sandbox
	// Env is extra environment for every helper.
	Env []string
}

// PreflightAllow admits what bridge-preflight tries before it falls back:
// one connection to the daemon's socket and one open of the start-up
// lock, both refused inside the sandbox (the real heartbeat refuses them
// with EPERM; here run/ is an empty read-only tmpfs). Nothing else.
func (b *Bridge) PreflightAllow() Allow {
	run := filepath.Join(b.Home, "run")
	return func(name, line string) bool {
		switch name {
		case "socket":
			return strings.Contains(line, "AF_UNIX")
		case "connect":
			return strings.Contains(line, `"`+filepath.Join(run, "cbth.sock")+`"`) && strings.Contains(line, "= -1")
		case "openat":
			return strings.Contains(line, `"`+filepath.Join(run, "daemon.lock")+`"`) && strings.Contains(line, "= -1")
		}
		return false
	}
}

// Helper runs one cbth desktop helper in the sandbox with --json and
// decodes its output into out (unless the helper failed). Sandbox
// violations are returned as an error.
func (b *Bridge) Helper(out any, allow Allow, args ...string) (Result, error) {
	full := append(append([]string{"--home", b.Home, "desktop"}, args...), "--json")
	r, err := b.Sandbox.Run(append([]string{"CBTH_HOME=" + b.Home}, b.Env...), allow, b.Bin, full...)
	if err != nil {
		return r, err
	}
	if len(r.Violations) > 0 {
		return r, fmt.Errorf("cbth desktop %s broke the heartbeat sandbox:\n%s", args[0], r)
	}
	if r.Code == 0 && out != nil {
		if err := json.Unmarshal([]byte(r.Stdout), out); err != nil {
			return r, fmt.Errorf("cbth desktop %s printed no JSON: %v\n%s", args[0], err, r)
		}
	}
	return r, nil
}

// RelayPrint runs `cbth desktop relay print` in the sandbox, as a bridge
// does to write back, and returns the one line it printed: exactly one
// line, or an error.
func (b *Bridge) RelayPrint(kind, marker string) (string, error) {
	args := []string{"--home", b.Home, "desktop", "relay", "print", "--bridge-thread-id", b.ThreadID, "--kind", kind, "--marker", marker}
	r, err := b.Sandbox.Run(append([]string{"CBTH_HOME=" + b.Home}, b.Env...), nil, b.Bin, args...)
	switch {
	case err != nil:
		return "", err
	case len(r.Violations) > 0:
		return "", fmt.Errorf("cbth desktop relay print broke the heartbeat sandbox:\n%s", r)
	case r.Code != 0 || !strings.HasSuffix(r.Stdout, "\n") || strings.Count(r.Stdout, "\n") != 1:
		return "", fmt.Errorf("cbth desktop relay print --kind %s did not print one line:\n%s", kind, r)
	}
	return strings.TrimSuffix(r.Stdout, "\n"), nil
}

// Wake is what one bridge wake saw.
type Wake struct {
	Preflight  api.PreflightReply
	ArmPending inbox.List[inbox.ArmPendingEntry]
	PauseDue   inbox.List[inbox.PauseDueEntry]
	Claim      inbox.Claim
	// Direct is the same revision read as direct_file_read does: the
	// manifest and its files, straight from the inbox.
	Direct DirectRead
	// Failed is set when preflight failed closed: the wake exits at once
	// and reads nothing (its Result says why).
	Failed *Result
}

// DirectRead is a revision read file by file.
type DirectRead struct {
	Manifest     inbox.Manifest
	Ready        inbox.ReadyThreads
	ArmPending   inbox.ArmPendingBindings
	PauseDue     inbox.PauseDueBindings
	Bindings     inbox.Bindings
	Installation inbox.InstallationState
}

// Wake runs one bridge wake: preflight first (the wake exits if it fails
// closed), then the helper_cli_read helpers, and the same revision read
// directly; both transports must agree on what is ready.
func (b *Bridge) Wake() (Wake, error) {
	var w Wake
	r, err := b.Helper(&w.Preflight, b.PreflightAllow(), "bridge-preflight", "--bridge-thread-id", b.ThreadID)
	if err != nil {
		return w, err
	}
	if r.Code != 0 {
		w.Failed = &r
		return w, nil
	}
	for _, h := range []struct {
		out  any
		name string
	}{{&w.ArmPending, "list-arm-pending"}, {&w.PauseDue, "list-pause-due"}, {&w.Claim, "claim-next-ready"}} {
		r, err := b.Helper(h.out, nil, h.name, "--bridge-thread-id", b.ThreadID)
		if err != nil {
			return w, err
		}
		if r.Code != 0 {
			return w, fmt.Errorf("%s failed after a fresh preflight:\n%s", h.name, r)
		}
	}
	if w.Direct, err = ReadDirect(filepath.Join(b.Home, "inbox"), b.ThreadID); err != nil {
		return w, err
	}
	if w.Direct.Manifest.SnapshotRevision == w.Claim.SnapshotRevision {
		var first *inbox.ReadyEntry
		if len(w.Direct.Ready.Entries) > 0 {
			first = &w.Direct.Ready.Entries[0]
		}
		if w.Claim.NotReadyReason == "" && !reflect.DeepEqual(first, w.Claim.Ready) {
			return w, fmt.Errorf("direct_file_read and claim-next-ready disagree on revision %d: %+v and %+v", w.Claim.SnapshotRevision, first, w.Claim.Ready)
		}
		if !reflect.DeepEqual(w.Direct.ArmPending.Entries, w.ArmPending.Entries) || !reflect.DeepEqual(w.Direct.PauseDue.Entries, w.PauseDue.Entries) {
			return w, fmt.Errorf("direct_file_read and the list helpers disagree on revision %d", w.Claim.SnapshotRevision)
		}
	}
	return w, nil
}

// ReadDirect reads the current revision of an inbox as a direct_file_read
// bridge does: the manifest, then each file it names, each checked
// against it.
func ReadDirect(dir, bridge string) (DirectRead, error) {
	var d DirectRead
	s, err := inbox.Reader{Dir: dir, Bridge: bridge}.Open()
	if err != nil {
		return d, err
	}
	defer s.Close()
	d.Manifest = s.Manifest
	if d.Ready, err = s.ReadyThreads(); err != nil {
		return d, err
	}
	if d.ArmPending, err = s.ArmPending(); err != nil {
		return d, err
	}
	if d.PauseDue, err = s.PauseDue(); err != nil {
		return d, err
	}
	if d.Bindings, err = s.Bindings(); err != nil {
		return d, err
	}
	d.Installation, err = s.Installation()
	return d, err
}
