package codextest

import (
	"slices"
	"testing"
	"time"
)

// Pair times two ways of doing the same thing, alternating which goes
// first, so both see the same machine load; it reports each one's median
// in ms and the ratio of the medians.
func Pair(b *testing.B, names [2]string, do [2]func() time.Duration) {
	var d [2][]time.Duration
	i := 0
	for b.Loop() {
		for k := range 2 {
			j := (i + k) % 2
			d[j] = append(d[j], do[j]())
		}
		i++
	}
	med := func(x []time.Duration) float64 {
		slices.Sort(x)
		return float64(x[len(x)/2]) / float64(time.Millisecond)
	}
	m0, m1 := med(d[0]), med(d[1])
	b.ReportMetric(m0, names[0]+"-ms")
	b.ReportMetric(m1, names[1]+"-ms")
	b.ReportMetric(m0/m1, names[0]+"/"+names[1])
}
