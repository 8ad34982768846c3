package runner

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
	"golang.org/x/sys/unix"
)

// IsTTY reports whether f is a terminal.
func IsTTY(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// ProcessDrivers are the drivers of a real process: debug in-process, the
// network drivers through the cbth-providers helper, whose stderr goes to
// stderr. The provider SDKs are never linked into this binary.
func ProcessDrivers(stderr io.Writer) driver.Set { return provider.Drivers(stderr) }

// RunID returns "run-" and a fresh UUIDv7 (RFC 9562: 48-bit Unix
// milliseconds, version 7, variant 10, 74 random bits from getrandom). It
// is built here rather than through github.com/google/uuid because that
// package brings crypto/rand and its package init into every start of the
// binary, and a run id needs no more than the kernel's randomness.
func RunID() string {
	var u [16]byte
	fillRandom(u[6:])
	ms := uint64(time.Now().UnixMilli())
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	const hexd = "0123456789abcdef"
	b := make([]byte, 0, 40)
	b = append(b, "run-"...)
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexd[c>>4], hexd[c&0xf])
	}
	return string(b)
}

// fillRandom fills b from getrandom, else /dev/urandom, else (never on a
// supported kernel) from the clock and pid, which still keeps ids of one
// host apart. It makes the system call itself: unix.Getrandom goes through
// the vDSO, whose first use in a process maps and faults in per-thread
// state and then calls getrandom anyway, all for one 10-byte read.
func fillRandom(b []byte) {
	for {
		n, _, errno := unix.Syscall(unix.SYS_GETRANDOM, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0)
		if errno == unix.EINTR {
			continue
		}
		if errno == 0 && int(n) == len(b) {
			return
		}
		break
	}
	if fd, err := openRetry("/dev/urandom"); err == nil {
		n, err := unix.Read(fd, b)
		unix.Close(fd)
		if err == nil && n == len(b) {
			return
		}
	}
	x := uint64(time.Now().UnixNano())*0x9E3779B97F4A7C15 ^ uint64(os.Getpid())<<32
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}

// ProcessEnv is the Env of the running process. SIGINT and SIGTERM cancel
// a call to a driver that runs outside this process (the helper then gets
// SIGTERM); the in-process debug driver runs without signal handlers.
func ProcessEnv(ctx context.Context) Env {
	return Env{
		Context: ctx,
		Interrupt: func(ctx context.Context) (context.Context, context.CancelFunc) {
			return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		},
		StdinIsTTY: IsTTY(os.Stdin),
		Drivers:    ProcessDrivers(os.Stderr),
		NewRunID:   RunID,
	}
}
