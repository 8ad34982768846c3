package enginetest

import (
	"encoding/binary"
	"os"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// The damage a test does to a closed log file, the same way in the engine's
// tests and in the binary's: what a crash, a bad disk or a restored backup
// leaves behind.

// DeleteTail removes the last n records of the log bucket of the file at
// path with bbolt itself, leaving the projections (and the acknowledged
// head beside the file) as they were: a log that lost its newest commits.
func DeleteTail(tb testing.TB, path string, n int) {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("log"))
		for i := 0; i < n; i++ {
			k, _ := b.Cursor().Last()
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// CorruptNewestMeta flips a byte of the checksum of the meta page with the
// higher transaction id, so bbolt opens the transaction before it: a
// commit rolled back under the log. A bbolt meta page is a 16-byte page
// header, then magic, version, page size, flags, root bucket (16),
// freelist, pgid, txid and checksum, little-endian.
func CorruptNewestMeta(tb testing.TB, path string) {
	tb.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 64)
	if _, err := f.ReadAt(head, 0); err != nil {
		tb.Fatal(err)
	}
	pageSize := int64(binary.LittleEndian.Uint32(head[24:]))
	txid := func(page int64) uint64 {
		b := make([]byte, 8)
		f.ReadAt(b, page*pageSize+64)
		return binary.LittleEndian.Uint64(b)
	}
	newest := int64(0)
	if txid(1) > txid(0) {
		newest = 1
	}
	b := make([]byte, 1)
	f.ReadAt(b, newest*pageSize+72)
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, newest*pageSize+72); err != nil {
		tb.Fatal(err)
	}
}

// LogBranchPage returns the page size and the root page of the log bucket
// of the file at path, failing tb unless that root is a branch page (the
// log spans several leaves): the page every read of the log goes through.
func LogBranchPage(tb testing.TB, path string) (pageSize, root int) {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var branch bool
	db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("log"))
		root = int(b.Root())
		branch = b.Stats().BranchPageN > 0
		return nil
	})
	if !branch || root < 2 {
		tb.Fatalf("the log bucket has no branch page (root %d)", root)
	}
	return db.Info().PageSize, root
}

// PageFaults are the ways a page of the log is damaged on disk, each
// applied to a copy of the file's bytes given the page size and the log's
// branch page (LogBranchPage). AtOpen says whether Open reads the damaged
// page (it reads the path to the last record); the others are found by the
// first read that reaches it.
var PageFaults = []struct {
	Name   string
	Damage func(b []byte, pageSize, branch int) []byte
	AtOpen bool
}{
	{"zeroed branch page", func(b []byte, pageSize, branch int) []byte {
		clear(b[branch*pageSize : (branch+1)*pageSize])
		return b
	}, true},
	{"flipped bytes in a branch page", func(b []byte, pageSize, branch int) []byte {
		for i := branch*pageSize + 16; i < branch*pageSize+64; i++ {
			b[i] ^= 0xa5
		}
		return b
	}, false},
	// Cutting the file at half its length often cuts only pages bbolt
	// grew ahead of its data; cut where the log's root is.
	{"file cut short", func(b []byte, pageSize, branch int) []byte { return b[:branch*pageSize] }, true},
}
