package daemon_test

import (
	"runtime/debug"
	"testing"

	"github.com/cbth-dev/cbth/adapters/daemon"
)

func TestTuneGCRespectsTheEnvironment(t *testing.T) {
	prevGC, prevLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(prevGC); debug.SetMemoryLimit(prevLimit) })

	for _, tc := range []struct {
		env       map[string]string
		wantGC    int
		wantLimit int64
	}{
		{env: nil, wantGC: 400, wantLimit: 64 << 20},
		{env: map[string]string{"GOGC": "50"}, wantGC: 100, wantLimit: 64 << 20},
		{env: map[string]string{"GOMEMLIMIT": "1GiB"}, wantGC: 400, wantLimit: 1 << 40},
	} {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(1 << 40)
		daemon.TuneGC(func(k string) string { return tc.env[k] })
		if gc := debug.SetGCPercent(100); gc != tc.wantGC {
			t.Errorf("env %v: GC percent %d, want %d", tc.env, gc, tc.wantGC)
		}
		if limit := debug.SetMemoryLimit(-1); limit != tc.wantLimit {
			t.Errorf("env %v: memory limit %d, want %d", tc.env, limit, tc.wantLimit)
		}
	}
}
