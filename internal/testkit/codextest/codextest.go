// Package codextest gives tests the pinned Codex CLI and a private
// CODEX_HOME wired to a fake model on loopback.
//
// The pin is fixtures/codex/package.json and its lock. The npm package is a
// node wrapper that runs a native binary from a per-platform optional
// dependency; most tests run that native binary directly, because the
// wrapper costs a node start on every spawn (BenchmarkSpawnStdio in
// adapters/codex/appserver measures both). Wrapper gives the wrapper
// itself, the codex a user's npm install puts on PATH.
package codextest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Version is the Codex CLI version fixtures/codex pins.
const Version = "0.169.0"

// installTimeout bounds one `npm ci`: the platform package is about 120 MB
// compressed.
const installTimeout = 10 * time.Minute

// platform names the npm package and the vendor directory holding the
// native binary for this GOOS/GOARCH (see the wrapper, bin/codex.js).
func platform() (pkg, triple string, ok bool) {
	switch runtime.GOOS + "/" + runtime.GOARCH {
	case "linux/amd64":
		return "codex-linux-x64", "x86_64-unknown-linux-musl", true
	case "linux/arm64":
		return "codex-linux-arm64", "aarch64-unknown-linux-musl", true
	case "darwin/amd64":
		return "codex-darwin-x64", "x86_64-apple-darwin", true
	case "darwin/arm64":
		return "codex-darwin-arm64", "aarch64-apple-darwin", true
	}
	return "", "", false
}

// FixtureDir returns fixtures/codex of the repository the test runs in.
func FixtureDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "fixtures", "codex")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("codextest: no go.mod above the test's directory")
		}
		dir = parent
	}
}

// Binary returns the path of the pinned native codex executable, running
// `npm ci` in fixtures/codex first when it is absent or another version.
// It fails the test, never skips it, when the binary cannot be had: the
// Codex adapter is only proven against the real CLI.
func Binary(t testing.TB) string {
	t.Helper()
	return binaryIn(t, FixtureDir(t))
}

// Wrapper returns the absolute path of the pinned npm package's own codex
// command (fixtures/codex/node_modules/.bin/codex, the node script that
// `npm i -g @openai/codex` puts on a user's PATH), installing the pin
// first as Binary does. It runs under the node on PATH; with none, the
// test fails.
func Wrapper(t testing.TB) string {
	t.Helper()
	Binary(t)
	w := filepath.Join(FixtureDir(t), "node_modules", ".bin", "codex")
	if _, err := os.Stat(w); err != nil {
		t.Fatalf("codextest: the pinned install has no npm wrapper: %v", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("codextest: the npm wrapper needs node on PATH: %v", err)
	}
	return w
}

// WrapperForks reports whether the wrapper runs the native binary as its
// child rather than in its own place: it does under a Node without
// process.execve (Node 20, the one Debian ships). A socket the wrapper's
// app-server listens on is then served by another pid than the one
// started.
func WrapperForks(t testing.TB) bool {
	t.Helper()
	out, err := exec.Command("node", "-p", "typeof process.execve").Output()
	if err != nil {
		t.Fatalf("codextest: node: %v", err)
	}
	return strings.TrimSpace(string(out)) != "function"
}

// ShellWrapper writes a shell script that runs real as its child (no
// exec), as a wrapper on a user's PATH may, and returns its path: an
// app-server started through it is served by another pid than the one
// started, a member of its process group.
func ShellWrapper(t testing.TB, real string) string {
	t.Helper()
	script := filepath.Join(t.TempDir(), "codex")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n\""+real+"\" \"$@\"\nexit $?\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return script
}

func binaryIn(t testing.TB, dir string) string {
	t.Helper()
	pkg, triple, ok := platform()
	if !ok {
		t.Fatalf("codextest: Codex CLI %s has no native binary for %s/%s", Version, runtime.GOOS, runtime.GOARCH)
	}
	vendor := filepath.Join(dir, "node_modules", "@openai", pkg, "vendor", triple)
	bin, err := installed(vendor)
	if err == nil {
		return bin
	}
	// Test binaries of several packages run at once under go test ./...;
	// one installs while the others wait on the lock, then find it done.
	unlock := lock(t, filepath.Join(dir, ".install.lock"))
	defer unlock()
	if bin, err := installed(vendor); err == nil {
		return bin
	}
	t.Logf("codextest: %v; running npm ci in %s", err, dir)
	if err := npmCI(dir); err != nil {
		t.Fatalf("codextest: cannot install the pinned Codex CLI: %v", err)
	}
	bin, err = installed(vendor)
	if err != nil {
		t.Fatalf("codextest: npm ci ran but %v", err)
	}
	return bin
}

// installed checks the vendor directory's own manifest (written by the
// Codex release build) for the pinned version and returns its entrypoint.
func installed(vendor string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(vendor, "codex-package.json"))
	if err != nil {
		return "", fmt.Errorf("codex %s is not installed", Version)
	}
	var m struct {
		Version    string `json:"version"`
		Entrypoint string `json:"entrypoint"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("codex-package.json: %w", err)
	}
	if m.Version != Version {
		return "", fmt.Errorf("codex %s is installed, not %s", m.Version, Version)
	}
	if m.Entrypoint == "" {
		m.Entrypoint = "bin/codex"
	}
	bin := filepath.Join(vendor, filepath.FromSlash(m.Entrypoint))
	st, err := os.Stat(bin)
	if err != nil || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is missing or not executable", bin)
	}
	return bin, nil
}

func npmCI(dir string) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return errors.New("npm is not on PATH (the tests need Node and npm to install the pinned Codex CLI)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	// No install scripts: the Codex packages ship none, and a test run has no
	// business running any.
	cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("npm ci: %w\n%s", err, tail(out, 2000))
	}
	return nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

func lock(t testing.TB, path string) func() {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("codextest: %v", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("codextest: lock %s: %v", path, err)
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}
}

// FakeCodex builds testdata/fakecodex (see its package comment) into the
// test's temporary directory and returns the executable's path.
func FakeCodex(t testing.TB) string {
	t.Helper()
	root := filepath.Dir(filepath.Dir(FixtureDir(t)))
	out := filepath.Join(t.TempDir(), "codex")
	cmd := exec.Command("go", "build", "-o", out, "./internal/testkit/codextest/testdata/fakecodex")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build fakecodex: %v\n%s", err, b)
	}
	return out
}

// FaultCodex builds testdata/faultcodex (see its package comment) in front
// of the codex executable real and returns its path; the faults it
// applies are set with SetFaults.
func FaultCodex(t testing.TB, real string) string {
	t.Helper()
	root := filepath.Dir(filepath.Dir(FixtureDir(t)))
	out := filepath.Join(t.TempDir(), "codex")
	cmd := exec.Command("go", "build", "-o", out, "./internal/testkit/codextest/testdata/faultcodex")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build faultcodex: %v\n%s", err, b)
	}
	if err := os.WriteFile(out+".real", []byte(real+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// Fault is one rule of faultcodex: Action "error" answers the next Count
// requests of Method with the JSON-RPC error Code, "drop_response"
// forwards them and drops their answers.
type Fault struct {
	Method  string `json:"method"`
	Action  string `json:"action"`
	Code    int    `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Count   int    `json:"count"`
}

// SetFaults replaces the faults of the faultcodex at exe.
func SetFaults(t testing.TB, exe string, faults ...Fault) {
	t.Helper()
	b, err := json.Marshal(faults)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe+".faults.json", b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// FaultsApplied returns the lines faultcodex at exe logged, one per fault
// applied (or request traced).
func FaultsApplied(exe string) []string {
	b, err := os.ReadFile(exe + ".faults.log")
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}
