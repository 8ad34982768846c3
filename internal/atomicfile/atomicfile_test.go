package atomicfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cbth-dev/cbth/internal/atomicfile"
)

// Write replaces a file whole, with the mode asked for past the umask,
// leaving no temp file behind; a failed write leaves the old content.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state")
	if err := atomicfile.Write(p, []byte("one"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(p, []byte("two"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(b) != "two" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("content %q mode %v", b, fi.Mode().Perm())
	}
	failing := errReader{}
	if err := atomicfile.WriteFrom(p, failing, 0o600); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("a failed read: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Fatalf("a failed write changed the file to %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
	if err := atomicfile.Write(filepath.Join(dir, "no", "such", "dir"), nil, 0o600); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk gone") }

// Writers racing on one path never share a temp file: the result is one
// of the whole contents, never a mix.
func TestConcurrentWritersNeverMix(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	var wg sync.WaitGroup
	contents := map[string]bool{}
	for i := range 8 {
		c := strings.Repeat(string(rune('a'+i)), 64<<10)
		contents[c] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := atomicfile.Write(p, []byte(c), 0o600); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	b, _ := os.ReadFile(p)
	if !contents[string(b)] {
		t.Fatalf("the file is a mix of %d bytes", len(b))
	}
}
