package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"syscall"

	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// The acknowledged head.
//
// bbolt keeps two meta pages and opens the older one when the newer fails
// its checksum: the file then ends one transaction early, passes every
// check, and a commit its callers were told is durable is gone. So the
// engine keeps, beside the log, the seq and hash of the last commit it
// acknowledged, in <log>.ack, written after each commit's fsync: it can
// lag the log, never lead it. Open refuses a log whose head is older than
// it, or whose record at that seq has another hash.
//
// The file is created with the log and never removed, so it also records
// that this path has held a log: a missing or emptied log beside it is
// refused, never replaced by a new empty one.
//
// It holds two 64-byte slots, written in turn, each with its own checksum:
// a write torn by a crash spoils one slot and the other still holds the
// previous head.

// AckPath is the acknowledged-head file of the log at path.
func AckPath(path string) string { return path + ".ack" }

// Ack is an acknowledged head.
type Ack struct {
	Seq  uint64
	Hash events.Hash
}

const (
	ackSlot  = 64
	ackMagic = "cbthack1"
)

// castagnoli is built on first use, not at every start of the binary:
// the CLI half never checksums, and making the table costs a start about
// a third of a millisecond.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

func (a Ack) encode() []byte {
	b := make([]byte, ackSlot)
	copy(b, ackMagic)
	binary.BigEndian.PutUint64(b[8:], a.Seq)
	copy(b[16:48], a.Hash[:])
	binary.BigEndian.PutUint32(b[48:], crc32.Checksum(b[:48], castagnoli()))
	return b
}

func decodeAck(b []byte) (Ack, bool) {
	if len(b) < 52 || string(b[:8]) != ackMagic || binary.BigEndian.Uint32(b[48:]) != crc32.Checksum(b[:48], castagnoli()) {
		return Ack{}, false
	}
	a := Ack{Seq: binary.BigEndian.Uint64(b[8:])}
	copy(a.Hash[:], b[16:48])
	return a, true
}

// ReadAck returns the acknowledged head recorded beside the log at path,
// and which slot holds it; ok is false when there is no such file.
func ReadAck(path string) (a Ack, slot int, ok bool, err error) {
	p := AckPath(path)
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return Ack{}, 0, false, nil
	}
	if err != nil {
		return Ack{}, 0, false, errs.Wrap(errs.EACCES, err, "open %s", p)
	}
	defer f.Close()
	b := make([]byte, 2*ackSlot)
	n, err := f.ReadAt(b, 0)
	if err != nil && err != io.EOF {
		return Ack{}, 0, false, errs.IO(err, "read %s", p)
	}
	found := false
	for i := 0; i*ackSlot < n; i++ {
		if s, valid := decodeAck(b[i*ackSlot : min(n, (i+1)*ackSlot)]); valid && (!found || s.Seq > a.Seq) {
			a, slot, found = s, i, true
		}
	}
	if !found {
		return Ack{}, 0, true, errs.New(errs.ECORRUPT, "%s holds no valid acknowledged head; if the log beside it is known to be good, remove %s and the next start writes it again", p, p)
	}
	return a, slot, true, nil
}

// ackWriter keeps the acknowledged head up to date.
type ackWriter struct {
	f    *os.File
	next int64 // the slot the next write goes to
	seq  uint64
}

// createAck writes a new acknowledged-head file, durably, before the log
// it describes is used.
func createAck(path string, a Ack) (*ackWriter, error) {
	p := AckPath(path)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, errs.IO(err, "create %s", p)
	}
	w := &ackWriter{f: f}
	err = w.write(a)
	if err == nil {
		_, err = f.WriteAt(make([]byte, ackSlot), ackSlot)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = syncDir(filepath.Dir(p))
	}
	if err != nil {
		f.Close()
		return nil, errs.IO(err, "write %s", p)
	}
	return w, nil
}

func openAck(path string, slot int, a Ack) (*ackWriter, error) {
	p := AckPath(path)
	f, err := os.OpenFile(p, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, errs.IO(err, "open %s", p)
	}
	return &ackWriter{f: f, next: int64(1 - slot), seq: a.Seq}, nil
}

// write records a as acknowledged. It does not fsync: after a crash of the
// process the page cache still has it, and after a power loss it may only
// lag, which is the one direction it is allowed to be wrong in.
func (w *ackWriter) write(a Ack) error {
	if _, err := w.f.WriteAt(a.encode(), w.next*ackSlot); err != nil {
		return err
	}
	w.next, w.seq = 1-w.next, a.Seq
	return nil
}

func (w *ackWriter) close() error {
	err := w.f.Sync()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// The recover boundary.
//
// bbolt trusts its file: a zeroed or overwritten page makes it panic, and
// a page number past the end of the mapping makes it fault. Every use of
// the file runs inside catch, which turns both into a value (a fault
// becomes a panic through SetPanicOnFault, which holds for the calling
// goroutine only, so goroutines that read the file call catch too).

// catch runs fn and returns what it panicked with, or nil.
func catch(fn func()) (caught any) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() { caught = recover() }()
	fn()
	return nil
}

// damaged is the error for a panic caught while reading path.
func damaged(path string, p any) error {
	return &errs.Error{Code: errs.ECORRUPT, Message: fmt.Sprintf("%s is damaged: reading it failed inside bbolt (%v)", path, p)}
}

// checkStructure reads every page the file's trees reach (every bucket,
// key and value) inside the recover boundary and, when that succeeds,
// runs bbolt's own consistency check in a transaction from begin. It
// returns what it found, nothing for a sound file. bbolt's check is not
// run on a file whose pages cannot all be read: it reads them on a
// goroutine of its own, where a fault would end the process.
func checkStructure(db *bolt.DB, begin func() (*bolt.Tx, error)) []string {
	var probs []string
	var err error
	if p := catch(func() { err = db.View(walkFile) }); p != nil {
		return append(probs, fmt.Sprintf("reading the file's pages failed inside bbolt (%v); bbolt's consistency check was not run, the page structure itself is broken", p))
	}
	if err != nil {
		probs = append(probs, err.Error())
	}
	tx, err := begin()
	if err != nil {
		return append(probs, fmt.Sprintf("begin the consistency check: %v", err))
	}
	defer tx.Rollback()
	for cerr := range tx.Check() {
		probs = append(probs, "bbolt check: "+cerr.Error())
	}
	return probs
}

// walkFile reads every key and value of every bucket, so each reachable
// page (overflow pages included) is touched once.
func walkFile(tx *bolt.Tx) error {
	var sum uint32
	var walk func(b *bolt.Bucket)
	walk = func(b *bolt.Bucket) {
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			sum = crc32.Update(sum, castagnoli(), k)
			if v != nil {
				sum = crc32.Update(sum, castagnoli(), v)
			} else if nb := b.Bucket(k); nb != nil {
				walk(nb)
			}
		}
	}
	return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { walk(b); return nil })
}

// openError gives a failed bbolt open its code.
func openError(path string, err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return errs.Wrap(errs.EBUSY, err, "open %s: another process holds the log", path)
	case errors.Is(err, fs.ErrNotExist):
		return errs.Wrap(errs.ENOENT, err, "open %s", path)
	case errors.Is(err, fs.ErrPermission):
		return errs.Wrap(errs.EACCES, err, "open %s", path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return errs.Wrap(errs.ECORRUPT, err, "open %s: both of its meta pages are damaged or it is not a bbolt file", path)
	}
	var pe *fs.PathError
	var errno syscall.Errno
	if !errors.As(err, &pe) && !errors.As(err, &errno) {
		// Not the system refusing a call: bbolt refusing the content
		// (a file cut shorter than its own meta says, say).
		return errs.Wrap(errs.ECORRUPT, err, "open %s", path)
	}
	return errs.IO(err, "open %s", path)
}
