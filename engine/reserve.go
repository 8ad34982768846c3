package engine

import (
	bolt "go.etcd.io/bbolt"
)

// The page reserve.
//
// bbolt takes pages for a commit from its freelist and, when that runs
// dry, from the end of the file, moving the high-water mark. A log only
// grows, so without help some commit in every few moves the mark: a third
// of single-event commits here. On this machine kind the data flush of
// such a commit takes about 130 µs longer than that of a commit with the
// same number of pages that stays below the mark (strace, 3,000 commits;
// writing zeros past the mark beforehand recovers only a third of it).
//
// So the writer moves the mark in bulk instead: when few pages are free
// after a commit, the next commit also stores reservePages pages of
// filler under bucketReserve, and the commit after it deletes them. Their
// pages return to the freelist, the commits that follow take their pages
// from it, and the mark moves once per reservePages pages of growth
// instead of once every few commits. In a bare bbolt A/B (two trees, one
// event each per commit) this made commits 11 to 16% faster.
//
// The bucket holds nothing but filler. A crash between the two commits
// leaves it in the file, and the next commit deletes it.
var bucketReserve = []byte("reserve")

// A reserve is written once in full, so its commit is slower, but rarely:
// 256 pages last a single writer some 700 commits. A group of 64 writers
// takes 30 to 60 pages a commit, hence the low-water mark of 64: below it
// a group would move the mark itself. (64 pages and a mark of 32 gave 15x
// a bare update at 64 writers where these give 17x; the 1-writer p99 is
// unchanged at 0.6 ms.)
const (
	reservePages = 256 // 1 MiB of 4 KiB pages per move of the mark
	reserveLow   = 64  // free pages below which the next commit reserves
)

// tendReserve deletes the reserve the previous commit stored (or a crash
// left), or stores one if the freelist is nearly empty. The leader calls it
// in every commit that appends. Whether a reserve is held is read from the
// file, not kept beside it: a root-bucket lookup per commit, against a
// flag that Open and every commit outcome would have to keep right.
func (e *Engine) tendReserve(tx *bolt.Tx) error {
	if tx.Bucket(bucketReserve) != nil {
		return tx.DeleteBucket(bucketReserve)
	}
	// The stats are those of the last commit. Its pending pages (the ones
	// it freed, the last reserve's among them) were released to the
	// freelist when this transaction began, unless a reader still holds
	// them, so they count as free here. Counting free pages alone made
	// every other commit store a new reserve right after the last one was
	// deleted, rewriting 64 pages each time.
	if st := tx.DB().Stats(); st.FreePageN+st.PendingPageN >= reserveLow {
		return nil
	}
	b, err := tx.CreateBucket(bucketReserve)
	if err != nil {
		return err
	}
	// One value spanning the pages: bbolt stores it as one overflow run,
	// and deleting it frees the run in one piece.
	size := reservePages*tx.DB().Info().PageSize - 64
	if len(e.filler) != size {
		e.filler = make([]byte, size)
	}
	return b.Put([]byte("filler"), e.filler)
}
