package task

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"unicode/utf8"
)

// Kept is what of a task's output can still be read: segments in output
// order (each an open file and how many of its bytes count), where their
// first byte is in the output (Start) and on which line (StartLine, from
// 1; 0 when not known).
type Kept struct {
	segs      []keptSeg
	Start     int64
	StartLine int64
}

type keptSeg struct {
	r    io.ReaderAt
	size int64
}

// Size is how many bytes are kept.
func (k *Kept) Size() int64 {
	var n int64
	for _, s := range k.segs {
		n += s.size
	}
	return n
}

// Close closes the segments.
func (k *Kept) Close() {
	for _, s := range k.segs {
		if c, ok := s.r.(io.Closer); ok {
			c.Close()
		}
	}
	k.segs = nil
}

// KeptBytes is kept output held in memory (the tail a task's end
// recorded): its first byte at start of the output, on a line not known.
func KeptBytes(b []byte, start int64) *Kept {
	return &Kept{segs: []keptSeg{{bytes.NewReader(b), int64(len(b))}}, Start: start}
}

// KeptFile is the kept output of a task that ended: one file, its first
// byte at start of the output, on line startLine (0: not known).
func KeptFile(path string, start, startLine int64) (*Kept, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Kept{segs: []keptSeg{{f, fi.Size()}}, Start: start, StartLine: startLine}, nil
}

// ErrEnded is Process.Kept's answer once the output's spool is being
// merged for the task's end: read what the task's end recorded.
var ErrEnded = errors.New("the task has ended")

// Kept opens the running task's kept output as it is now. The segments
// are opened under the writer's lock, so a rotation after the call does
// not change what they hold up to their sizes.
func (p *Process) Kept() (*Kept, error) {
	c := p.out
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrEnded
	}
	k := &Kept{Start: c.droppedBytes, StartLine: c.droppedNL + 1}
	add := func(path string, size int64) error {
		if size == 0 {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		k.segs = append(k.segs, keptSeg{f, size})
		return nil
	}
	if err := add(c.path+".1", c.prev); err != nil {
		return nil, err
	}
	if err := add(c.path, c.seg); err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

// Chunk is one read of a task's output.
type Chunk struct {
	Data []byte
	// Offset is where Data starts in the output; Line the line it
	// starts on (0: not known); Next and NextLine the same after it.
	Offset, Line, Next, NextLine int64
	// Dropped: the read asked for output before the kept start, and
	// starts there instead.
	Dropped bool
}

// Read reads at most limit bytes of the kept output, from the output's
// byte offset, or (line > 0) from the start of that line. A read cut by
// limit ends after its last whole line when it holds one, else on a
// character boundary, so reads that follow each other with Next never
// split a line or a character they did not have to.
func (k *Kept) Read(offset, line int64, limit int) (Chunk, error) {
	size := k.Size()
	end := k.Start + size
	var ch Chunk
	switch {
	case line > 0:
		if k.StartLine == 0 {
			return ch, fmt.Errorf("the line numbers of this output are not known (its start was not kept): read it by offset")
		}
		if line < k.StartLine {
			ch.Dropped, offset = true, k.Start
			break
		}
		off, err := k.lineStart(line)
		if err != nil {
			return ch, err
		}
		offset = off
	case offset < k.Start:
		ch.Dropped, offset = true, k.Start
	case offset > end:
		offset = end
	}
	n := min(int64(limit), end-offset)
	buf := make([]byte, n)
	if err := k.readAt(buf, offset-k.Start); err != nil {
		return ch, err
	}
	if n < end-offset {
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			buf = buf[:i+1]
		} else if len(buf) > 0 {
			if i := lastStart(buf); !utf8.FullRune(buf[i:]) {
				buf = buf[:i]
			}
		}
	}
	ch.Data, ch.Offset, ch.Next = buf, offset, offset+int64(len(buf))
	if k.StartLine > 0 {
		before, err := k.newlines(offset - k.Start)
		if err != nil {
			return ch, err
		}
		ch.Line = k.StartLine + before
		ch.NextLine = ch.Line + int64(bytes.Count(buf, newline))
	}
	return ch, nil
}

// Tail reads the last bytes of the kept output, at most n, from the
// start of a line when the window holds a line end.
func (k *Kept) Tail(n int) (Chunk, error) {
	end := k.Start + k.Size()
	from := max(k.Start, end-int64(n))
	if from > k.Start {
		b := make([]byte, end-from)
		if err := k.readAt(b, from-k.Start); err != nil {
			return Chunk{}, err
		}
		// The byte before from ends a line, or the first line end in
		// the window does.
		prev := make([]byte, 1)
		if err := k.readAt(prev, from-k.Start-1); err != nil {
			return Chunk{}, err
		}
		if i := bytes.IndexByte(b, '\n'); prev[0] != '\n' && i >= 0 && i < len(b)-1 {
			from += int64(i) + 1
		}
	}
	return k.Read(from, 0, n)
}

// lastStart is the index of the last character's first byte in b.
func lastStart(b []byte) int {
	i := len(b) - 1
	for i > 0 && i > len(b)-utf8.UTFMax && !utf8.RuneStart(b[i]) {
		i--
	}
	return i
}

// readAt fills b from the kept output at off (from its start).
func (k *Kept) readAt(b []byte, off int64) error {
	for _, s := range k.segs {
		if len(b) == 0 {
			return nil
		}
		if off >= s.size {
			off -= s.size
			continue
		}
		n := min(int64(len(b)), s.size-off)
		if _, err := s.r.ReadAt(b[:n], off); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		b, off = b[n:], 0
	}
	return nil
}

// scan calls fn with the kept output in order, up to limit bytes (from
// its start), a block at a time; fn returns false to stop.
func (k *Kept) scan(limit int64, fn func(b []byte, at int64) bool) error {
	buf := make([]byte, 64<<10)
	var at int64
	for at < limit {
		n := min(int64(len(buf)), limit-at)
		if err := k.readAt(buf[:n], at); err != nil {
			return err
		}
		if !fn(buf[:n], at) {
			return nil
		}
		at += n
	}
	return nil
}

// newlines counts the line ends in the first n kept bytes.
func (k *Kept) newlines(n int64) (int64, error) {
	var c int64
	err := k.scan(n, func(b []byte, _ int64) bool { c += int64(bytes.Count(b, newline)); return true })
	return c, err
}

// lineStart is the output offset where line starts (the kept end when
// the output has no such line yet).
func (k *Kept) lineStart(line int64) (int64, error) {
	want := line - k.StartLine // line ends to pass
	if want == 0 {
		return k.Start, nil
	}
	off := k.Start + k.Size()
	err := k.scan(k.Size(), func(b []byte, at int64) bool {
		for i, c := range b {
			if c == '\n' {
				if want--; want == 0 {
					off = k.Start + at + int64(i) + 1
					return false
				}
			}
		}
		return true
	})
	return off, err
}
