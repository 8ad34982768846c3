package execfile_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cbth-dev/cbth/internal/execfile"
)

func TestRewriteKeepsBytesAndMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bin")
	want := []byte("#!/bin/sh\necho hi\n")
	if err := os.WriteFile(p, want, 0o750); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(p)
	if err := execfile.Rewrite(p); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("content %q, %v", got, err)
	}
	after, _ := os.Stat(p)
	if after.Mode() != before.Mode() {
		t.Fatalf("mode %v, was %v", after.Mode(), before.Mode())
	}
	if os.SameFile(before, after) {
		t.Fatal("the file was not replaced by a new one")
	}
	if err := execfile.Rewrite(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Fatal("rewrote a file that does not exist")
	}
}
