package command_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cbth-dev/cbth/engine/command"
)

// The back-off after a proven reject, as a table: it doubles from Base
// with each reject of the attempt, stops at Max, and the jitter takes at
// most its share off, drawn from the attempt id and reject count only.
func TestBackoffTable(t *testing.T) {
	const id = "01a1fd8c-6900-7d34-9f0e-e5552052443e"
	m := time.Minute
	tests := []struct {
		name    string
		b       command.Backoff
		rejects int
		want    time.Duration
	}{
		{"first reject waits base", command.Backoff{Base: m, Max: time.Hour}, 1, m},
		{"second doubles", command.Backoff{Base: m, Max: time.Hour}, 2, 2 * m},
		{"sixth", command.Backoff{Base: m, Max: time.Hour}, 6, 32 * m},
		{"seventh reaches the cap", command.Backoff{Base: m, Max: time.Hour}, 7, time.Hour},
		{"far past the cap stays there", command.Backoff{Base: m, Max: time.Hour}, 1000, time.Hour},
		{"a cap between powers", command.Backoff{Base: m, Max: 5 * m}, 4, 5 * m},
		{"just under a cap between powers", command.Backoff{Base: m, Max: 5 * m}, 3, 4 * m},
		{"no cap set: base always", command.Backoff{Base: m}, 5, m},
		{"cap below base: base always", command.Backoff{Base: m, Max: time.Second}, 5, m},
		{"reject count 0 counts as the first", command.Backoff{Base: m, Max: time.Hour}, 0, m},
		{"no base: no wait", command.Backoff{Max: time.Hour}, 3, 0},
		{"a cap near the largest duration does not overflow", command.Backoff{Base: time.Hour, Max: 1<<63 - 1}, 200, 1<<63 - 1},
		{"jitter 0 is none", command.Backoff{Base: m, Max: time.Hour, Jitter: 0}, 3, 4 * m},
		{"jitter 1 or more is none", command.Backoff{Base: m, Max: time.Hour, Jitter: 1}, 3, 4 * m},
		// Pinned draws: a change here changes what the same log and
		// config decide, so it must be deliberate.
		{"jittered first", command.Backoff{Base: m, Max: time.Hour, Jitter: 0.2}, 1, 55755203523},
		{"jittered third", command.Backoff{Base: m, Max: time.Hour, Jitter: 0.2}, 3, 217328390528},
		{"jittered at the cap", command.Backoff{Base: m, Max: time.Hour, Jitter: 0.2}, 8, 3242353058458},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.b.Delay(id, tt.rejects); got != tt.want {
				t.Fatalf("Delay(%d) = %v (%d), want %v", tt.rejects, got, int64(got), tt.want)
			}
		})
	}
}

// Over many attempts and reject counts the jittered wait stays within
// [d - d*jitter, d], is the same every time it is asked, and differs
// between attempts (so threads rejected together spread out).
func TestBackoffJitterBoundsAndSpread(t *testing.T) {
	b := command.Backoff{Base: time.Minute, Max: time.Hour, Jitter: 0.2}
	plain := command.Backoff{Base: b.Base, Max: b.Max}
	for n := 1; n <= 12; n++ {
		d := plain.Delay("", n)
		lo := d - time.Duration(float64(d)*b.Jitter)
		seen := map[time.Duration]bool{}
		for i := range 200 {
			id := fmt.Sprintf("attempt-%d", i)
			got := b.Delay(id, n)
			if got < lo || got > d {
				t.Fatalf("reject %d of %s: %v outside [%v, %v]", n, id, got, lo, d)
			}
			if again := b.Delay(id, n); again != got {
				t.Fatalf("reject %d of %s: %v then %v", n, id, got, again)
			}
			seen[got] = true
		}
		if len(seen) < 190 {
			t.Fatalf("reject %d: only %d distinct waits over 200 attempts", n, len(seen))
		}
	}
}
