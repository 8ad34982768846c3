package task

import (
	"bytes"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/events"
)

// LineWatch is a watcher's matcher: every line of the task's output, as
// the spool gets it (redacted), is matched against Patterns, on its first
// LineMax bytes; a line that matches one is handed to Match.
type LineWatch struct {
	Patterns []*regexp.Regexp
	LineMax  int
	// Match is called on the goroutine that reads the task's output, in
	// output order: it must not block (the task would wait on its pipe).
	Match func(events.TaskLine)
}

// lineWatch splits the output into lines and matches them. The patterns
// are tried one by one, never joined into one alternation: each keeps
// Go's literal fast paths (a literal prefix is searched for, an anchored
// pattern fails at once), which an alternation loses (25 times slower on
// a typical log line in BenchmarkWatch's stream).
type lineWatch struct {
	w    *LineWatch
	line []byte // the current line so far, at most LineMax bytes
	cut  bool   // the current line is longer than LineMax
	no   int64  // the current line's number
}

func newLines(w *LineWatch) *lineWatch {
	if w == nil || len(w.Patterns) == 0 {
		return nil
	}
	return &lineWatch{w: w, line: make([]byte, 0, w.LineMax), no: 1}
}

func (l *lineWatch) write(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			l.add(b)
			return
		}
		l.add(b[:i])
		l.endLine()
		b = b[i+1:]
	}
}

func (l *lineWatch) add(b []byte) {
	room := l.w.LineMax - len(l.line)
	if len(b) > room {
		b, l.cut = b[:room], true
	}
	l.line = append(l.line, b...)
}

// end takes the last line, should the output not end with a line end.
func (l *lineWatch) end() {
	if len(l.line) > 0 || l.cut {
		l.endLine()
	}
}

func (l *lineWatch) endLine() {
	line := bytes.TrimSuffix(l.line, []byte{'\r'})
	for i, re := range l.w.Patterns {
		if re.Match(line) {
			l.w.Match(events.TaskLine{Line: l.no, Pattern: i, Text: lineText(line, l.w.LineMax), Cut: l.cut})
			break
		}
	}
	l.line, l.cut = l.line[:0], false
	l.no++
}

// lineText is a line as text of at most max bytes: invalid UTF-8
// replaced, a character cut at the bound dropped.
func lineText(b []byte, max int) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	for len(s) > max {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}
