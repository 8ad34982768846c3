package inbox

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Fingerprint is the validation fingerprint of a cbth helper for a read
// transport: what a live validation in Codex Desktop actually proved
// works. It covers cbth's version, the OS and architecture, where the
// executable is (a heartbeat approves running one path, not another), the
// snapshot schema version and the read transport. When the fingerprint a
// cbth observes differs from the one the installation state recorded at
// repair, nothing counts as validated.
func Fingerprint(version, goos, goarch, executable, transport string) string {
	h := sha256.New()
	for _, part := range []string{"cbth-desktop-fingerprint-1", version, goos, goarch, executable,
		strconv.Itoa(SchemaVersion), transport} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "fp1-" + hex.EncodeToString(h.Sum(nil))[:32]
}

// Executable is the running cbth's own path with symbolic links resolved:
// the location the fingerprint covers. It only reads.
func Executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return strings.TrimSuffix(exe, " (deleted)"), nil
}

// Observe returns the fingerprint the running cbth has for transport.
func Observe(version, transport string) (string, error) {
	exe, err := Executable()
	if err != nil {
		return "", err
	}
	return Fingerprint(version, runtime.GOOS, runtime.GOARCH, exe, transport), nil
}
