package artifact

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/cbth-dev/cbth/internal/errs"
)

// OpenRegular opens a file a user named, for reading, and refuses it
// unless it is a regular file. The check is on the opened descriptor, not
// the path, so the file cannot be swapped in between; and the open does
// not block (O_NONBLOCK), so naming a FIFO with no writer is refused at
// once instead of hanging the request. what names the file in errors
// ("result file").
func OpenRegular(path, what string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil, errs.New(errs.ENOENT, "%s %s does not exist", what, path)
		case errors.Is(err, fs.ErrPermission):
			return nil, nil, errs.New(errs.EACCES, "%s %s is not readable", what, path)
		}
		return nil, nil, errs.Wrap(errs.EINVAL, err, "open %s %s", what, path)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, errs.Wrap(errs.EINVAL, err, "stat %s %s", what, path)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, errs.New(errs.EINVAL, "%s %s is not a regular file", what, path)
	}
	return f, fi, nil
}

// ReadRegular reads a regular file of at most limit bytes (see
// OpenRegular); a longer one is EFBIG, however it grows while it is read.
func ReadRegular(path, what string, limit int64) ([]byte, error) {
	f, fi, err := OpenRegular(path, what)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, errs.New(errs.EFBIG, "%s %s is %d bytes, over the %d byte limit", what, path, fi.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, errs.Wrap(errs.EINVAL, err, "read %s %s", what, path)
	}
	if int64(len(b)) > limit {
		return nil, errs.New(errs.EFBIG, "%s %s grew past the %d byte limit while it was read", what, path, limit)
	}
	return b, nil
}

// Hash returns the SHA-256 of a result file (see OpenRegular) without
// storing it, bounded by the store's limit.
func (s Store) Hash(src string) (string, error) {
	f, fi, err := OpenRegular(src, "result file")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if fi.Size() > s.MaxBytes {
		return "", errs.New(errs.EFBIG, "result file %s is %d bytes, over the %d byte limit (max_result_bytes)", src, fi.Size(), s.MaxBytes)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, s.MaxBytes+1)); err != nil {
		return "", errs.Wrap(errs.EINVAL, err, "read result file %s", src)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
