package daemon

import "runtime/debug"

// GC settings of the daemon process. Its live heap is small (tens of MiB
// with a large log) while every commit allocates tens of KiB of bbolt
// nodes, so with Go's default (collect when the heap doubles) the
// collector runs hundreds of times a second under load and takes CPU from
// the single writer. Collecting at five times the live heap, capped by a
// soft memory limit, cut that cost: the engine's append benchmarks, which
// run with these settings (engine/bench_test.go), measured 8 writers at
// 3.4-3.6x a bare bbolt update instead of 3.0-3.1x.
const (
	gcPercent   = 400
	memoryLimit = 64 << 20
)

// TuneGC applies the daemon's GC settings, except where GOGC or
// GOMEMLIMIT in the environment already chose.
func TuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
}
