package codextest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder stands in for a test to see how Binary ends it.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Fatalf(f string, a ...any) { r.fatal = sprintf(f, a...); stop() }
func (r *recorder) Fatal(a ...any)            { r.fatal = sprint(a...); stop() }
func (r *recorder) Skip(a ...any)             { r.skip = sprint(a...); stop() }
func (r *recorder) Skipf(f string, a ...any)  { r.skip = sprintf(f, a...); stop() }
func (r *recorder) SkipNow()                  { r.skip = "SkipNow"; stop() }

// run calls Binary's body for dir in its own goroutine (Fatalf ends it).
func run(t *testing.T, dir string) (*recorder, string) {
	r := &recorder{TB: t}
	var bin string
	done := make(chan struct{})
	go func() {
		defer close(done)
		bin = binaryIn(r, dir)
	}()
	<-done
	return r, bin
}

func fixture(t *testing.T, version string) (dir, bin string) {
	dir = t.TempDir()
	pkg, triple, ok := platform()
	if !ok {
		t.Fatalf("no Codex build for this platform")
	}
	vendor := filepath.Join(dir, "node_modules", "@openai", pkg, "vendor", triple)
	if err := os.MkdirAll(filepath.Join(vendor, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	manifest := `{"version":"` + version + `","entrypoint":"bin/codex"}`
	if err := os.WriteFile(filepath.Join(vendor, "codex-package.json"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(vendor, "bin", "codex")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir, bin
}

// The pinned version in place: its native binary, and npm is not needed.
func TestBinaryFindsInstalledPin(t *testing.T) {
	dir, want := fixture(t, Version)
	t.Setenv("PATH", "")
	r, got := run(t, dir)
	if r.fatal != "" || r.skip != "" || got != want {
		t.Fatalf("got %q (fatal %q skip %q), want %q", got, r.fatal, r.skip, want)
	}
}

// Another version, or none, and no npm to install the pin: the test fails
// (it is never skipped), saying why.
func TestBinaryFailsWithoutNpm(t *testing.T) {
	other, _ := fixture(t, "0.1.0")
	for name, dir := range map[string]string{"other version": other, "absent": t.TempDir()} {
		t.Setenv("PATH", "")
		r, _ := run(t, dir)
		if r.skip != "" || !strings.Contains(r.fatal, "npm is not on PATH") {
			t.Errorf("%s: fatal %q skip %q, want a failure naming npm", name, r.fatal, r.skip)
		}
	}
}

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }
func sprint(a ...any) string            { return fmt.Sprint(a...) }
func stop()                             { runtime.Goexit() }
