package rotate_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cbth-dev/cbth/internal/rotate"
)

// A file past its size moves to .1, the older copies each one further,
// the oldest kept one dropped; a file within its size, a missing one and
// something that is not a regular file stay as they are; keep 0 removes
// the file.
func TestIfOver(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "daemon.log")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "-"
		}
		return string(b)
	}
	if done, err := rotate.IfOver(p, 10, 2); done || err != nil {
		t.Fatalf("a missing file: %v %v", done, err)
	}
	os.WriteFile(p, []byte("small"), 0o600)
	if done, err := rotate.IfOver(p, 10, 2); done || err != nil || read("daemon.log") != "small" {
		t.Fatalf("a file within its size: %v %v", done, err)
	}
	for _, gen := range []string{"first-over!", "second-over!", "third-over!", "fourth-over!"} {
		os.WriteFile(p, []byte(gen), 0o600)
		if done, err := rotate.IfOver(p, 10, 3); !done || err != nil {
			t.Fatalf("%s: %v %v", gen, done, err)
		}
	}
	if read("daemon.log") != "-" || read("daemon.log.1") != "fourth-over!" || read("daemon.log.2") != "third-over!" ||
		read("daemon.log.3") != "second-over!" || read("daemon.log.4") != "-" {
		t.Fatalf("after four, keeping three: %q %q %q %q %q", read("daemon.log"), read("daemon.log.1"), read("daemon.log.2"), read("daemon.log.3"), read("daemon.log.4"))
	}
	os.WriteFile(p, []byte("too long to keep"), 0o600)
	if done, err := rotate.IfOver(p, 1, 0); !done || err != nil || read("daemon.log") != "-" || read("daemon.log.1") != "fourth-over!" {
		t.Fatalf("keep 0: %v %v, %q", done, err, read("daemon.log"))
	}
	os.Mkdir(p, 0o700)
	if done, err := rotate.IfOver(p, 0, 2); done || err != nil {
		t.Fatalf("a directory: %v %v", done, err)
	}
}
