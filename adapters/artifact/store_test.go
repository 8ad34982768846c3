package artifact_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/artifact"
	"github.com/cbth-dev/cbth/internal/errs"
)

var now = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func store(t *testing.T, max int64) artifact.Store {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "artifacts")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return artifact.Store{Dir: dir, MaxBytes: max}
}

// A result is copied whole into the store under an id derived from the
// job and the content, with its manifest beside it and private modes; the
// submitter's file may go at once. The same job and content ingested
// again (a retry after a crash) is the same artifact.
func TestIngest(t *testing.T) {
	s := store(t, 1<<20)
	src := filepath.Join(t.TempDir(), "result.json")
	content := []byte(`{"ok":true,"tests":42}`)
	os.WriteFile(src, content, 0o644)
	in, err := s.Ingest(src, "job-1", now)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(src)
	sum := sha256.Sum256(content)
	if b, _ := os.ReadFile(in.ManagedPath); string(b) != string(content) || in.SHA256 != hex.EncodeToString(sum[:]) ||
		in.SizeBytes != int64(len(content)) || in.ContentType != "application/json" || filepath.Dir(in.ManagedPath) != filepath.Join(s.Dir, in.ArtifactID) {
		t.Fatalf("ingested %+v", in)
	}
	var m artifact.Manifest
	b, _ := os.ReadFile(in.ManifestPath)
	if err := json.Unmarshal(b, &m); err != nil || m.ArtifactID != in.ArtifactID || m.SourceJobID != "job-1" || m.OriginalName != "result.json" || !m.CreatedAt.Equal(now) {
		t.Fatalf("manifest %s (%v)", b, err)
	}
	for _, p := range []string{in.ManagedPath, in.ManifestPath} {
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v", p, fi.Mode().Perm())
		}
	}
	os.WriteFile(src, content, 0o600)
	again, err := s.Ingest(src, "job-1", now)
	if err != nil || again.ArtifactID != in.ArtifactID {
		t.Fatalf("a retry: %+v, %v", again, err)
	}
	other, _ := s.Ingest(src, "job-2", now)
	if other.ArtifactID == in.ArtifactID {
		t.Fatal("another job's result has the same id")
	}
	ents, _ := os.ReadDir(s.Dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("a staging directory is left: %s", e.Name())
		}
	}
	if h, err := s.Hash(src); err != nil || h != in.SHA256 {
		t.Errorf("Hash: %s, %v", h, err)
	}
	if err := s.Remove(in.ArtifactID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(in.ManagedPath)); !os.IsNotExist(err) {
		t.Errorf("removed, yet %v", err)
	}
	if err := s.Remove(in.ArtifactID); err != nil {
		t.Errorf("removing what is gone: %v", err)
	}
}

// What is not a readable regular file within the limit is refused before
// anything is stored: a missing file, a directory, a FIFO (at once, not
// hung), a file over the limit; ids that would leave the store are
// refused by Remove.
func TestIngestRefusals(t *testing.T) {
	s := store(t, 10)
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	os.WriteFile(big, []byte("more than ten bytes"), 0o600)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path string
		code       errs.Code
		says       string
	}{
		{"missing", filepath.Join(dir, "nope"), errs.ENOENT, "does not exist"},
		{"a directory", dir, errs.EINVAL, "not a regular file"},
		{"a FIFO", fifo, errs.EINVAL, "not a regular file"},
		{"over the limit", big, errs.EFBIG, "max_result_bytes"},
	} {
		if _, err := s.Ingest(c.path, "job", now); errs.CodeOf(err) != c.code || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %s saying %q", c.name, err, c.code, c.says)
		}
		if _, err := s.Hash(c.path); errs.CodeOf(err) != c.code {
			t.Errorf("%s: Hash %v", c.name, err)
		}
	}
	if ents, _ := os.ReadDir(s.Dir); len(ents) != 0 {
		t.Errorf("refusals stored %v", ents)
	}
	for _, id := range []string{"", ".", "..", "a/b", `a\b`} {
		if err := s.Remove(id); errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("Remove(%q): %v", id, err)
		}
	}
	if b, err := artifact.ReadRegular(big, "metadata file", 100); err != nil || string(b) != "more than ten bytes" {
		t.Errorf("ReadRegular: %q, %v", b, err)
	}
	if _, err := artifact.ReadRegular(big, "metadata file", 5); errs.CodeOf(err) != errs.EFBIG || !strings.Contains(err.Error(), "metadata file") {
		t.Errorf("ReadRegular over its limit: %v", err)
	}
}
