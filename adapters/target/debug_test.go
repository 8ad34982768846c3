package target

import (
	"path/filepath"
	"testing"
)

// A thread id names one file directly under threads/, whatever bytes it
// holds, and two ids never share a file.
func TestThreadFileStaysInThreadsDir(t *testing.T) {
	d := &DebugTarget{Dir: t.TempDir()}
	dir := filepath.Join(d.Dir, "threads")
	seen := map[string]string{}
	for _, id := range []string{"thread-0001", "a/b", "../../etc/passwd", "..", ".", "a b", "a%2Fb", "é", "\x00\n", "A", "a"} {
		f := d.ThreadFile(id)
		if filepath.Dir(f) != dir {
			t.Errorf("%q: file %s is not directly under %s", id, f, dir)
		}
		if other, ok := seen[f]; ok {
			t.Errorf("%q and %q share %s", id, other, f)
		}
		seen[f] = id
	}
}
