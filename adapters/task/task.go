// Package task runs the commands of `cbth task run` for the daemon. Each
// command leads its own process group; its stdout and stderr go through
// one pipe into a capped spool file and an in-memory tail; stopping it
// sends TERM to the group, then KILL after a grace period.
//
// Every process of a task inherits a lock file as descriptor 3, locked
// by the daemon before the start. The lock is held for as long as any of
// them lives, whatever becomes of the daemon, so a later daemon can tell
// for certain whether a task it finds unfinished left processes behind.
// Which group to stop is never read from that file (the task can write
// it): the daemon records the leader's identity, its pid and the
// kernel's start time of it (Group), in the log, and a later daemon
// signals the group only while that very process still holds the pid
// (Reap).
package task

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/internal/proc"
	"golang.org/x/sys/unix"
)

// Spec is one command to run.
type Spec struct {
	Path string   // the program, absolute
	Argv []string // argv[0] first
	Dir  string
	Env  []string
	// Spool is the file the output is written to (created 0600, must
	// not exist), Lock the task's lock file.
	Spool, Lock string
	// SpoolMax bounds the spool: it is rotated (Spool.1 holds the
	// segment before) so that the latest output is kept, at least half
	// of SpoolMax of it once there is that much, and what came before is
	// counted only.
	SpoolMax int64
	TailMax  int // bytes of the latest output kept in memory
	Grace    time.Duration
	// Watch, when set, sees every line of the output as the spool gets
	// it (redacted): the task is a watcher (watch.go).
	Watch *LineWatch
}

// Output is what became of a task's output.
type Output struct {
	Bytes         int64 // everything the command wrote
	Spooled       int64 // the part the spool kept: the last bytes, at most SpoolMax
	Truncated     bool  // Bytes > Spooled: the start of the output was not kept
	Tail          []byte
	TailTruncated bool // the tail is not the whole output
	// DroppedLines counts the line ends in the part of the output the
	// spool did not keep: the kept output starts on line DroppedLines+1.
	DroppedLines int64
}

// Exit is how a task's process ended.
type Exit struct {
	Code     int    // -1 when a signal ended it
	Signal   string // "TERM", "KILL", ... when a signal ended it
	Killed   bool   // Stop had to send KILL after the grace period
	Duration time.Duration
	Output   Output
}

// Process is a running task.
type Process struct {
	spec    Spec
	cmd     *exec.Cmd
	pid     int
	group   Group
	lock    *os.File
	out     *capture
	started time.Time

	done       chan struct{} // closed when Wait's result is ready
	exit       Exit
	stopOnce   sync.Once
	mu         sync.Mutex
	killed     bool
	leaderGone bool // the leader has exited (it may not be reaped yet)
	exited     bool // the leader is reaped: its pid is no longer the group's
	reapOnce   sync.Once
	waitErr    error // what reaping it returned
}

// Start starts the command. On error nothing is left running and the
// spool and lock files are removed.
func Start(s Spec) (p *Process, err error) {
	lock, err := os.OpenFile(s.Lock, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create lock: %w", err)
	}
	spool, err := os.OpenFile(s.Spool, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		lock.Close()
		os.Remove(s.Lock)
		return nil, fmt.Errorf("create spool: %w", err)
	}
	r, w, err := os.Pipe()
	defer func() {
		if err != nil {
			r.Close()
			w.Close()
			spool.Close()
			lock.Close()
			os.Remove(s.Spool)
			os.Remove(s.Lock)
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	if err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("lock %s: %w", s.Lock, err)
	}
	cmd := &exec.Cmd{Path: s.Path, Args: s.Argv, Dir: s.Dir, Env: s.Env, Stdout: w, Stderr: w,
		ExtraFiles: []*os.File{lock}, SysProcAttr: groupAttr()}
	if err = cmd.Start(); err != nil {
		return nil, err
	}
	w.Close() // the children hold the write end; EOF comes when they are all gone
	// The leader is our unreaped child: its pid is still its own, so the
	// start time read now is its. Unreadable, the group stays unverified
	// and a later daemon never signals it.
	g := Group{PID: cmd.Process.Pid}
	g.Start, _, _ = proc.Start(g.PID)
	p = &Process{spec: s, cmd: cmd, pid: cmd.Process.Pid, group: g, lock: lock, started: time.Now(), done: make(chan struct{}),
		out: &capture{path: s.Spool, spool: spool, segMax: max(s.SpoolMax/2, 1), tail: make([]byte, 0, s.TailMax), tailMax: s.TailMax,
			lines: newLines(s.Watch)}}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		// Redacted on the way in: neither the spool nor the tail ever
		// holds what the task printed of its own secrets.
		red := NewRedacting(p.out, s.Env)
		_, _ = io.Copy(red, r)
		_ = red.Close()
	}()
	go p.wait(r, drained)
	return p, nil
}

// PID is the command's process id, which is also its process group id.
func (p *Process) PID() int { return p.pid }

// Group is the identity of the task's process group, to record.
func (p *Process) Group() Group { return p.group }

// Done is closed when the task has ended and Wait returns at once.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits until the task has ended and its output is captured.
func (p *Process) Wait() Exit {
	<-p.done
	return p.exit
}

// wait waits for the leader to exit, then for the output pipe to close:
// other processes of the group may still hold it. Those that outlive
// the leader by a grace period are stopped like the task itself, and a
// process that left the group cannot hold the spool open for ever: the
// pipe is closed after a last grace period. The leader is reaped only
// then: until it is, its pid (the group id) cannot be reused, so every
// signal to the group reaches this task's processes and no others.
func (p *Process) wait(r *os.File, drained <-chan struct{}) {
	if waitExited(p.pid) != nil {
		p.reap() // cannot wait without reaping: fall back to reaping at once
	}
	exitedAt := time.Now()
	p.mu.Lock()
	p.leaderGone = true
	p.mu.Unlock()
	g := p.spec.Grace
	select {
	case <-drained:
	case <-time.After(g):
		_ = signalGroup(p.pid, syscall.SIGTERM)
		select {
		case <-drained:
		case <-time.After(g):
			_ = signalGroup(p.pid, syscall.SIGKILL)
			select {
			case <-drained:
			case <-time.After(g):
				r.Close()
				<-drained
			}
		}
	}
	err := p.reap()
	p.mu.Lock()
	killed := p.killed
	p.mu.Unlock()
	x := Exit{Code: -1, Killed: killed, Duration: exitedAt.Sub(p.started)}
	var ee *exec.ExitError
	switch {
	case err == nil:
		x.Code = 0
	case errors.As(err, &ee):
		x.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			x.Code, x.Signal = -1, strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
		}
	}
	r.Close()
	x.Output = p.out.close()
	p.lock.Close()
	os.Remove(p.spec.Lock)
	p.exit = x
	close(p.done)
}

// reap waits for the leader once (a second call returns the first
// result); from then on its pid may belong to anyone, so no signal is
// sent to the group any more.
func (p *Process) reap() error {
	p.reapOnce.Do(func() {
		err := p.cmd.Wait()
		p.mu.Lock()
		p.exited, p.waitErr = true, err
		p.mu.Unlock()
	})
	return p.waitErr
}

// Stop sends TERM to the task's process group and, if the leader has not
// exited after the grace period, KILL. It returns at once; only the
// first call signals.
func (p *Process) Stop() {
	p.stopOnce.Do(func() {
		p.mu.Lock()
		if !p.exited {
			_ = signalGroup(p.pid, syscall.SIGTERM)
		}
		p.mu.Unlock()
		go func() {
			select {
			case <-p.done:
			case <-time.After(p.spec.Grace):
				p.mu.Lock()
				if !p.leaderGone {
					p.killed = true
					_ = signalGroup(p.pid, syscall.SIGKILL)
				}
				p.mu.Unlock()
			}
		}()
	})
}

// groupAttr makes the command the leader of a new process group, so one
// signal reaches every process it starts (unless one moves itself out).
func groupAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// capture writes the output to the spool and keeps the latest tailMax
// bytes in memory. The spool is two segments of at most segMax bytes:
// when the current one is full it becomes path.1 (the older one is
// dropped, only counted) and a new one starts, so the spool always ends
// with the latest output and is never truncated in place. It counts the
// line ends of each segment, so a reader knows which line the kept
// output starts on (Process.Kept), and hands each line to a watcher's
// matcher once the spool has it.
type capture struct {
	mu      sync.Mutex // the counts and the segments, against Process.Kept
	path    string
	spool   *os.File
	segMax  int64
	seg     int64 // bytes in the current segment
	prev    int64 // bytes in path.1
	n       int64
	werr    error
	tail    []byte
	tailMax int

	segNL, prevNL int64 // line ends in the current segment and in path.1
	droppedNL     int64 // line ends in the segments dropped
	droppedBytes  int64
	lines         *lineWatch // nil for a task that is not a watcher
	closed        bool       // the spool is merged, or being: read the artifact
}

func (c *capture) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.n += int64(len(b))
	for w := b; len(w) > 0 && c.werr == nil; {
		if c.seg == c.segMax {
			c.werr = c.rotate()
			continue
		}
		part := w[:min(int64(len(w)), c.segMax-c.seg)]
		n, err := c.spool.Write(part)
		c.seg += int64(n)
		c.segNL += int64(bytes.Count(part[:n], newline))
		// A full disk ends the spool, never the task: the output is
		// still counted and its tail kept.
		c.werr = err
		w = w[n:]
	}
	c.mu.Unlock()
	if c.tailMax > 0 {
		if len(b) >= c.tailMax {
			c.tail = append(c.tail[:0], b[len(b)-c.tailMax:]...)
		} else {
			if over := len(c.tail) + len(b) - c.tailMax; over > 0 {
				c.tail = append(c.tail[:0], c.tail[over:]...)
			}
			c.tail = append(c.tail, b...)
		}
	}
	if c.lines != nil {
		c.lines.write(b)
	}
	return len(b), nil
}

var newline = []byte{'\n'}

// rotate makes the full segment path.1 and starts a new one.
func (c *capture) rotate() error {
	if err := c.spool.Close(); err != nil {
		return err
	}
	if err := os.Rename(c.path, c.path+".1"); err != nil {
		return err
	}
	f, err := os.OpenFile(c.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	c.droppedBytes, c.droppedNL = c.droppedBytes+c.prev, c.droppedNL+c.prevNL
	c.spool, c.prev, c.seg = f, c.seg, 0
	c.prevNL, c.segNL = c.segNL, 0
	return nil
}

func (c *capture) close() Output {
	if c.lines != nil {
		c.lines.end()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	_ = c.spool.Sync()
	c.spool.Close()
	kept, dropped := c.prev+c.seg, c.droppedNL
	if c.prev > 0 {
		if err := MergeSpool(c.path); err != nil {
			// path.1 is left beside; the spool holds the last segment
			kept, dropped = c.seg, dropped+c.prevNL
		}
	}
	return Output{Bytes: c.n, Spooled: kept, Truncated: c.n > kept, Tail: c.tail, TailTruncated: c.n > int64(len(c.tail)), DroppedLines: dropped}
}

// MergeSpool makes a rotated spool one file again: path.1 (the older
// segment), then path, at path. A spool never rotated is left as it is.
func MergeSpool(path string) error {
	older, err := os.OpenFile(path+".1", os.O_WRONLY|os.O_APPEND, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	newer, err := os.Open(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		older.Close()
		return err
	}
	if newer != nil {
		_, err = io.Copy(older, newer)
		newer.Close()
	}
	if err == nil {
		err = older.Sync()
	}
	if cerr := older.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(path+".1", path)
}

// TailText renders an output tail as text for the log: the bytes cut to
// a character boundary at the start and invalid UTF-8 replaced, so the
// recorded text never changes when re-encoded.
func TailText(b []byte) string {
	i := 0
	for i < len(b) && i < utf8.UTFMax && !utf8.RuneStart(b[i]) {
		i++
	}
	return strings.ToValidUTF8(string(b[i:]), "\uFFFD")
}

// ReadTail returns the last n bytes of a spool file and its size.
func ReadTail(path string, n int64) ([]byte, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := fi.Size()
	from := max(size-n, 0)
	b := make([]byte, size-from)
	_, err = f.ReadAt(b, from)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, size, err
	}
	return b, size, nil
}

// Group identifies a task's process group by its leader: the pid (also
// the group id) and the kernel's start time of that process. The daemon
// records it when the task starts; the task cannot change it, and no
// other process ever has both.
type Group struct {
	PID   int
	Start string // "" when it could not be read: the group is never verified
}

// checkStart says why pid is not the process that started at start (""
// when it is).
func checkStart(pid int, start string) string {
	now, ok, err := proc.Start(pid)
	switch {
	case err != nil:
		return fmt.Sprintf("the start time of pid %d cannot be read (%v)", pid, err)
	case !ok:
		return fmt.Sprintf("its group leader (pid %d) has exited", pid)
	case now != start:
		return fmt.Sprintf("pid %d is now another process (started %s, the task's leader %s)", pid, now, start)
	}
	return ""
}

// Reaped is what Reap found and did.
type Reaped struct {
	// Left: processes of the task still held its lock.
	Left bool
	// Signalled: the task's group was verified and signalled.
	Signalled bool
	// Unverified says why the group was not signalled, or why signalling
	// stopped ("" when it was not needed or went through).
	Unverified string
}

// Reap ends what is left of a task whose daemon died: if any process of
// the task still holds its lock file, its process group gets TERM, then
// KILL after the grace period, but only while its leader is verified to
// be the process g recorded (pid and start time, through a pidfd where
// the kernel has one): a group id alone may have been reused, or written
// by the task. A group that fails the check is never signalled, and
// Reaped says why. A missing lock file means the task never started.
func Reap(lockPath string, g Group, grace time.Duration) (Reaped, error) {
	f, err := os.OpenFile(lockPath, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return Reaped{}, nil
	}
	if err != nil {
		return Reaped{}, err
	}
	defer f.Close()
	free := func() bool { return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil }
	if free() {
		return Reaped{}, nil
	}
	r := Reaped{Left: true}
	if g.PID <= 1 || g.Start == "" {
		r.Unverified = "the log holds no start time of its group leader (a task started by an older cbth, or its start never recorded)"
		return r, nil
	}
	l, why := openLeader(g.PID, g.Start)
	if l == nil {
		r.Unverified = why
		return r, nil
	}
	defer l.close()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		// The leader still holding its pid (alive or a zombie) keeps the
		// group id from being reused: only then is the group the task's.
		if why := l.check(); why != "" {
			r.Unverified = why
			if r.Signalled {
				r.Unverified += " after TERM; the rest of its group was not signalled again"
			}
			return r, nil
		}
		_ = signalGroup(g.PID, sig)
		l.signal(sig) // the leader too, should it have left its group
		r.Signalled = true
		for deadline := time.Now().Add(grace); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if free() {
				return r, nil
			}
		}
	}
	// A process that left the group and kept descriptor 3 open still
	// holds it; nothing more can be done for it here.
	return r, fmt.Errorf("processes of the task still hold %s after KILL", lockPath)
}
