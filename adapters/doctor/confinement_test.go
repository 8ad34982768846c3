package doctor

import (
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/confine"
)

// Doctor warns for each right this kernel cannot keep a confined program
// from, naming it, and is ok only when every one is kept.
func TestConfinementFinding(t *testing.T) {
	all := confine.Status{Available: true, Mechanism: "landlock ABI 7", Rights: []confine.Right{
		{Name: confine.RightFiles, Confined: true, How: "landlock ABI 7"},
		{Name: confine.RightUnixSockets, Confined: true, How: "seccomp"},
		{Name: confine.RightSignals, Confined: true, How: "landlock ABI 7 scopes"}}}
	if f := confinement(all)[0]; f.State != OK || !strings.Contains(f.Detail, "unix sockets (seccomp)") {
		t.Fatalf("all confined: %+v", f)
	}
	noSeccomp := all
	noSeccomp.Rights = append([]confine.Right{}, all.Rights...)
	noSeccomp.Rights[1] = confine.Right{Name: confine.RightUnixSockets, How: "this kernel takes no seccomp filter"}
	if f := confinement(noSeccomp)[0]; f.State != Warn || !strings.Contains(f.Detail, "NOT confined: unix sockets (this kernel takes no seccomp filter)") || !strings.Contains(f.Fix, "unix sockets") {
		t.Fatalf("no seccomp: %+v", f)
	}
	none := confine.Status{Mechanism: "none: no Landlock", Rights: []confine.Right{{Name: confine.RightFiles, How: "no Landlock"}}}
	if f := confinement(none)[0]; f.State != Warn || !strings.Contains(f.Detail, "UNCONFINED") {
		t.Fatalf("nothing confined: %+v", f)
	}
}
