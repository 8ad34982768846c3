package execfile_test

import (
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// interpOf is the reference: debug/elf's reading of the same file.
func interpOf(t testing.TB, path string) (string, bool) {
	f, err := elf.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return "", false
			}
			return strings.TrimRight(string(b), "\x00"), true
		}
	}
	return "", true
}

func TestInterpreterAgreesWithDebugELF(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A static build, whatever the cgo setting of this run.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module static\n\ngo 1.22\n"), 0o600)
	static := filepath.Join(dir, "static")
	build := exec.Command("go", "build", "-o", static, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	got, err := execfile.Interpreter(static)
	if err != nil || got != "" {
		t.Errorf("static Go binary: %q, %v; want no interpreter", got, err)
	}
	for _, p := range []string{self, static, "/bin/sh", "/usr/bin/env"} {
		want, ok := interpOf(t, p)
		if !ok {
			continue // absent on this machine
		}
		got, err := execfile.Interpreter(p)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; debug/elf says %q", p, got, err, want)
		}
	}
}

func TestInterpreterRejectsWhatIsNotELF(t *testing.T) {
	dir := t.TempDir()
	self, _ := os.Executable()
	whole, _ := os.ReadFile(self)
	for name, data := range map[string][]byte{
		"script":     []byte("#!/bin/sh\necho hi\n"),
		"empty":      nil,
		"magic only": []byte("\x7fELF"),
		"bad class":  append([]byte("\x7fELF\x07\x01\x01"), make([]byte, 64)...),
		"truncated":  whole[:40],
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
		if got, err := execfile.Interpreter(p); !errors.Is(err, execfile.ErrNotELF) {
			t.Errorf("%s: %q, %v; want ErrNotELF", name, got, err)
		}
	}
}

// Arbitrary bytes never panic, and whatever Interpreter reads, debug/elf
// reads the same when it accepts the file.
func FuzzInterpreter(f *testing.F) {
	self, _ := os.Executable()
	if b, err := os.ReadFile(self); err == nil {
		f.Add(b[:min(len(b), 1024)])
	}
	f.Add([]byte("#!/bin/sh\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := execfile.Interpreter(p)
		if err != nil {
			return
		}
		if want, ok := interpOf(t, p); ok && want != got {
			t.Fatalf("Interpreter %q, debug/elf %q", got, want)
		}
	})
}
