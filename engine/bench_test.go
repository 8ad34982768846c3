package engine_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/adapters/daemon"
	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/internal/testkit/enginetest"
)

// Engine benchmarks report their figure beside the physical reference
// measured in the same process: x_bare is the ratio to a bare bbolt
// one-event Update, x_flush to the raw write+fdatasync rate, x_scan to a
// bare cursor scan with json.Unmarshal. Each loop is time-bounded, so the
// figures are rates, not per-op times.

var (
	benchDur    = flag.Duration("bench.dur", 2*time.Second, "length of each timed loop in engine benchmarks")
	replayCount = flag.Int("bench.replay", 1_000_000, "events in the replay benchmark")
	benchRounds = flag.Int("bench.rounds", 15, "interleaved reference/load rounds per append benchmark")
)

var refs struct {
	once          sync.Once
	flush, update float64
	err           error
}

func references(b *testing.B) (flush, update float64) {
	refs.once.Do(func() {
		dir, err := os.MkdirTemp("", "cbth-bench-ref")
		if err != nil {
			refs.err = err
			return
		}
		defer os.RemoveAll(dir)
		if refs.flush, refs.err = enginetest.RawFsync(dir, *benchDur); refs.err != nil {
			return
		}
		refs.update, refs.err = enginetest.BareUpdate(filepath.Join(dir, "bare.db"), *benchDur)
	})
	if refs.err != nil {
		b.Fatal(refs.err)
	}
	return refs.flush, refs.update
}

func BenchmarkReference(b *testing.B) {
	flush, update := references(b)
	for range b.N {
	}
	b.ReportMetric(flush, "flush/s")
	b.ReportMetric(update, "bare_update/s")
	b.ReportMetric(update/flush, "x_flush")
}

// BenchmarkAppend interleaves its reference with the load: bench.rounds
// rounds of (bare one-event Update for a slice, engine load for a slice),
// a ratio per round, and the median reported. The disk's flush latency
// drifts by tens of percent within a minute on a shared host; a reference
// taken once, minutes away from the load, would carry that drift into
// the ratio. The reference's file is kept across the rounds, as the
// engine's log is, so both trees are about as deep when they are compared.
//
// The process runs with the daemon's GC settings (daemon.TuneGC), the
// reference included: the figure is the engine as cbth runs it.
func BenchmarkAppend(b *testing.B) {
	prevGC, prevLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	debug.SetGCPercent(prevGC)
	daemon.TuneGC(os.Getenv)
	defer func() { debug.SetGCPercent(prevGC); debug.SetMemoryLimit(prevLimit) }()
	references(b) // reported by BenchmarkReference
	slice := *benchDur / time.Duration(*benchRounds)
	for _, writers := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			dir := b.TempDir()
			e := open(b, dir, engine.Options{})
			var ratios, p50s, p99s, floors, overFloor, floorWrites []float64
			var events, secs float64
			// Page writes per commit (bbolt's TxStats.Write: dirty pages,
			// freelist, meta), the engine's beside the bare group's: what
			// one flush carries, the part of a commit the disk prices.
			writes0, commits0 := enginetest.PageWrites(e.DB()), e.Stats().Commits
			for range b.N {
				for range *benchRounds {
					bare, err := enginetest.BareUpdate(filepath.Join(dir, "bare.db"), slice)
					if err != nil {
						b.Fatal(err)
					}
					if writers > 1 {
						// The wait of a request in a group of the writers
						// cannot be below one bare Update of that many events.
						g, err := enginetest.BareGroup(filepath.Join(dir, "bare-group.db"), slice/2, writers)
						if err != nil {
							b.Fatal(err)
						}
						floors = append(floors, float64(g.P50.Microseconds())/1000)
						floorWrites = append(floorWrites, g.Writes)
					}
					r, err := enginetest.AppendLoad(e, writers, slice)
					if err != nil {
						b.Fatal(err)
					}
					ratios = append(ratios, r.Rate/bare)
					if len(floors) > 0 {
						overFloor = append(overFloor, r.P50.Seconds()*1000/floors[len(floors)-1])
					}
					p50s = append(p50s, float64(r.P50.Microseconds())/1000)
					p99s = append(p99s, float64(r.P99.Microseconds())/1000)
					events += r.Rate * slice.Seconds()
					secs += slice.Seconds()
				}
			}
			b.ReportMetric(events/secs, "ev/s")
			b.ReportMetric(median(ratios), "x_bare")
			b.ReportMetric(median(p50s), "p50_ms")
			b.ReportMetric(median(p99s), "p99_ms")
			if len(floors) > 0 {
				b.ReportMetric(median(floors), "bare_group_p50_ms")
				// The wait in units of that floor, measured round by round:
				// the form of the p50 figure that carries across disks.
				b.ReportMetric(median(overFloor), "p50_x_floor")
			}
			if st := e.Stats(); st.Commits > 0 {
				b.ReportMetric(float64(st.Requests)/float64(st.Commits), "req/commit")
				b.ReportMetric(float64(enginetest.PageWrites(e.DB())-writes0)/float64(st.Commits-commits0), "writes/commit")
			}
			if len(floorWrites) > 0 {
				b.ReportMetric(median(floorWrites), "bare_group_writes")
			}
		})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkReplay rebuilds every projection from a log of bench.replay
// events and compares the rate with a bare scan + json.Unmarshal of as
// many reference events, both with a warm page cache; the median ratio of
// bench.rounds/5 interleaved rounds is reported.
func BenchmarkReplay(b *testing.B) {
	dir := b.TempDir()
	n := *replayCount
	ref := filepath.Join(dir, "ref.db")
	if err := enginetest.BuildRefLog(ref, n); err != nil {
		b.Fatal(err)
	}
	e := open(b, dir, engine.Options{NoSync: true})
	if err := enginetest.Bulk(context.Background(), e, enginetest.NewGenerator(1, ""), n); err != nil {
		b.Fatal(err)
	}
	// Warm both files once.
	if _, err := enginetest.BareScanDecode(ref); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	// Interleaved like BenchmarkAppend, fewer rounds: each takes seconds.
	var bares, replays, ratios []float64
	for range b.N {
		for range max(1, *benchRounds/5) {
			bare, err := enginetest.BareScanDecode(ref)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			st, err := e.Rebuild(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			replay := float64(st.Events) / time.Since(t0).Seconds()
			bares, replays, ratios = append(bares, bare), append(replays, replay), append(ratios, replay/bare)
		}
	}
	b.ReportMetric(median(replays), "ev/s")
	b.ReportMetric(median(bares), "bare_scan_decode/s")
	b.ReportMetric(median(ratios), "x_scan")
}
