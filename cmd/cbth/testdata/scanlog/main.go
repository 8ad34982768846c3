// Command scanlog is the floor of the start-up benchmark: it opens a cbth
// log read-only and reads every record of the log bucket, nothing more,
// then prints the time that took, the records and bytes it read and its
// peak resident set (VmHWM, kB).
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

func main() {
	t0 := time.Now()
	db, err := bolt.Open(os.Args[1], 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var n, size int
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("log")).ForEach(func(k, v []byte) error {
			n++
			size += len(v)
			return nil
		})
	})
	db.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(time.Since(t0).Nanoseconds(), n, size, hwm())
}

func hwm() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "0"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			return strings.Fields(v)[0]
		}
	}
	return "0"
}
