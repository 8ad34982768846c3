// Package rotate keeps the files the daemon appends to outside its log
// (daemon.log, the Codex app-server logs) from growing for ever: at
// start, a file past its size is renamed path.1 (path.1 to path.2, and
// so on), keeping a bounded number of older copies.
package rotate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// IfOver rotates path when it is larger than max bytes, keeping keep
// older copies (0 keeps none: the file is removed). It reports whether
// it rotated. A missing file is not an error.
func IfOver(path string, max int64, keep int) (bool, error) {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !st.Mode().IsRegular() || st.Size() <= max {
		return false, nil
	}
	return true, Shift(path, keep)
}

// Shift moves path to path.1, path.1 to path.2, ..., dropping what
// would go past path.<keep>.
func Shift(path string, keep int) error {
	if keep <= 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	name := func(i int) string { return fmt.Sprintf("%s.%d", path, i) }
	if err := os.Remove(name(keep)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for i := keep - 1; i >= 1; i-- {
		if err := os.Rename(name(i), name(i+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return os.Rename(path, name(1))
}
