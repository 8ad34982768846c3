package inbox

import (
	"os/exec"
	"strings"
	"testing"
)

// The reader a heartbeat runs reaches no storage, socket, home set-up or
// daemon code: package inbox depends on the standard library and cbth's
// error codes only.
func TestReaderImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch p {
		case "github.com/cbth-dev/cbth/projections/inbox", "github.com/cbth-dev/cbth/internal/errs":
		default:
			t.Errorf("the reader depends on %s", p)
		}
	}
	std, err := exec.Command("go", "list", "-deps", "-f", "{{if .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(string(std)) {
		if p == "net" || p == "os/exec" || strings.HasPrefix(p, "net/http") {
			t.Errorf("the reader depends on %s", p)
		}
	}
}
