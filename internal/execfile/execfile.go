// Package execfile holds helpers for executable files: putting binaries in
// place the way installers do (for benchmarks that time process starts),
// and telling a static binary from a dynamically linked one.
package execfile

import (
	"encoding/binary"
	"errors"
	"io"
	"os"
)

// Rewrite writes an executable's bytes back through write(2) and renames
// the copy over it, as cbth install, cp and package managers put binaries
// in place. The Go linker writes its output through mmap; on the Linux of
// cbth's CI machines, such a file's page-cache pages fault in at exec
// markedly more slowly than the same bytes written by write(2) (cbth
// measured the echo object at 1.76x the spawn floor linker-written and
// 1.61x rewritten). Benchmarks rewrite every binary they compare.
func Rewrite(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".new", data, fi.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(path+".new", path)
}

// ErrNotELF reports a file that is not an ELF executable (a script, say).
var ErrNotELF = errors.New("not an ELF file")

// Interpreter returns the program interpreter an ELF executable names (its
// PT_INTERP segment, e.g. /lib64/ld-linux-x86-64.so.2), or "" for a static
// binary. A Go binary is dynamically linked when it was built with cgo
// enabled, which `go build` does by default wherever a C compiler is
// installed; then every start also runs the dynamic loader.
//
// It reads the program headers itself rather than through debug/elf, whose
// package is large for what cbth install needs.
func Interpreter(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var ident [16]byte
	if _, err := io.ReadFull(f, ident[:]); err != nil {
		return "", ErrNotELF
	}
	if string(ident[:4]) != "\x7fELF" {
		return "", ErrNotELF
	}
	var bo binary.ByteOrder
	switch ident[5] {
	case 1:
		bo = binary.LittleEndian
	case 2:
		bo = binary.BigEndian
	default:
		return "", ErrNotELF
	}
	// Offsets of e_phoff, e_phentsize and e_phnum, and of p_offset and
	// p_filesz within a program header, for ELFCLASS32 and ELFCLASS64.
	var phoff uint64
	var phentsize, phnum uint16
	var offAt, sizeAt, wordSize int
	switch ident[4] {
	case 1:
		var h [52]byte
		if _, err := f.ReadAt(h[:], 0); err != nil {
			return "", ErrNotELF
		}
		phoff = uint64(bo.Uint32(h[28:]))
		phentsize, phnum = bo.Uint16(h[42:]), bo.Uint16(h[44:])
		offAt, sizeAt, wordSize = 4, 16, 4
	case 2:
		var h [64]byte
		if _, err := f.ReadAt(h[:], 0); err != nil {
			return "", ErrNotELF
		}
		phoff = bo.Uint64(h[32:])
		phentsize, phnum = bo.Uint16(h[54:]), bo.Uint16(h[56:])
		offAt, sizeAt, wordSize = 8, 32, 8
	default:
		return "", ErrNotELF
	}
	if int(phentsize) < sizeAt+wordSize {
		return "", ErrNotELF
	}
	word := func(b []byte) uint64 {
		if wordSize == 4 {
			return uint64(bo.Uint32(b))
		}
		return bo.Uint64(b)
	}
	ph := make([]byte, phentsize)
	for i := range uint64(phnum) {
		if _, err := f.ReadAt(ph, int64(phoff+i*uint64(phentsize))); err != nil {
			return "", ErrNotELF
		}
		const ptInterp = 3
		if bo.Uint32(ph) != ptInterp {
			continue
		}
		off, size := word(ph[offAt:]), word(ph[sizeAt:])
		if size == 0 || size > 4096 {
			return "", ErrNotELF
		}
		name := make([]byte, size)
		if _, err := f.ReadAt(name, int64(off)); err != nil {
			return "", ErrNotELF
		}
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		return string(name), nil
	}
	return "", nil
}
