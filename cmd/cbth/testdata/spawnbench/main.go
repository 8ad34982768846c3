// Command spawnbench times process starts for the benchmarks: given a
// count and two command lines separated by "--", it runs them alternately
// that many times each, every run to completion with its output
// discarded, and prints the median wall time of each in milliseconds as
// JSON. Run inside a sandbox, it times both there.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"
)

func main() {
	n, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fail(err)
	}
	rest := os.Args[2:]
	i := slices.Index(rest, "--")
	if i < 1 || i == len(rest)-1 {
		fail(fmt.Errorf("usage: spawnbench N cmd... -- cmd..."))
	}
	cmds := [][]string{rest[:i], rest[i+1:]}
	times := [2][]time.Duration{}
	for k := 0; k < n+5; k++ {
		for j, c := range cmds {
			t0 := time.Now()
			if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
				fail(fmt.Errorf("%v: %v\n%s", c, err, out))
			}
			if k >= 5 { // the first runs warm the page cache
				times[j] = append(times[j], time.Since(t0))
			}
		}
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	json.NewEncoder(os.Stdout).Encode(map[string]float64{"a_ms": med(times[0]), "b_ms": med(times[1])})
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "spawnbench:", err)
	os.Exit(1)
}
