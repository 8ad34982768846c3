package codexqueue

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cbth-dev/cbth/adapters/home"
	"github.com/cbth-dev/cbth/internal/errs"
)

// A thread's rollout is the JSONL file Codex writes for it under the
// Codex home: sessions/YYYY/MM/DD/rollout-<time>-<thread>.jsonl. Its first
// record (session_meta) says where the thread came from; every turn
// appends a task_started event naming what triggered it ("user",
// "queue", "exec") and the turn's user message (observed on the pinned
// Codex 0.169; research: codex-queue F3).

// SourceExec is the source of a thread `codex exec` started: Codex's
// queue is never used for one, since an exec resume merges queued items
// into its own turn and loses the rest (openai/codex#41060).
const SourceExec = "exec"

// MaxRecord bounds one rollout record cbth reads whole; a longer one is
// read through unparsed (what it held is not seen).
const MaxRecord = 8 << 20

// FindRollout returns the path of thread's rollout under codexHome
// (sessions, then archived_sessions), checked unshared: a rollout another
// user could write could say anything. ENOENT when Codex has none.
func FindRollout(codexHome, thread string) (string, error) {
	if thread == "" || strings.ContainsAny(thread, `/\`) || strings.Contains(thread, "..") {
		return "", errs.New(errs.EINVAL, "thread id %q cannot name a rollout", thread)
	}
	suffix := "-" + thread + ".jsonl"
	var found string
	for _, dir := range []string{"sessions", "archived_sessions"} {
		root := filepath.Join(codexHome, dir)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) && p == root {
					return fs.SkipDir
				}
				return err
			}
			name := d.Name()
			if !d.IsDir() && strings.HasPrefix(name, "rollout-") && strings.HasSuffix(name, suffix) {
				found = p
				return fs.SkipAll
			}
			return nil
		})
		if err != nil {
			return "", errs.IO(err, "look for the rollout of thread %s under %s", thread, root)
		}
		if found != "" {
			break
		}
	}
	if found == "" {
		return "", errs.New(errs.ENOENT, "Codex has no rollout of thread %s under %s: it does not know the thread", thread, codexHome)
	}
	if err := home.CheckUnshared("rollout", found, false); err != nil {
		return "", err
	}
	return found, nil
}

// open opens a rollout for reading: a regular file, never blocking on
// something else put in its place.
func open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, errs.Wrap(errs.ENOENT, err, "open rollout")
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = errs.New(errs.EACCES, "rollout %s is not a regular file", path)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ThreadSource reads where a thread came from ("cli", "vscode", "exec",
// ...) from the session_meta record that starts its rollout. ECORRUPT
// when the first record is not one.
func ThreadSource(path string) (string, error) {
	f, err := open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(io.LimitReader(f, MaxRecord), 64<<10).ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", errs.IO(err, "read rollout %s", path)
	}
	var rec struct {
		Type    string `json:"type"`
		Payload struct {
			Source json.RawMessage `json:"source"`
		} `json:"payload"`
	}
	if json.Unmarshal(line, &rec) != nil || rec.Type != "session_meta" {
		return "", errs.New(errs.ECORRUPT, "rollout %s does not start with its session_meta record", path)
	}
	// The source is a word, or an object with one key for a structured
	// one (a sub-agent's).
	var s string
	if json.Unmarshal(rec.Payload.Source, &s) == nil {
		return s, nil
	}
	var o map[string]json.RawMessage
	if json.Unmarshal(rec.Payload.Source, &o) == nil && len(o) == 1 {
		for k := range o {
			return k, nil
		}
	}
	return "", errs.New(errs.ECORRUPT, "rollout %s names no source the queue can be judged by", path)
}

// Size is the rollout's size now: a drain scan for an item queued after
// this moment starts there.
func Size(path string) (int64, error) {
	f, err := open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, errs.IO(err, "stat rollout %s", path)
	}
	return st.Size(), nil
}

// DrainScan looks for a queued item drained into a thread: a turn that
// Codex's queue triggered (task_started with turn_trigger "queue") whose
// user message holds Marker. It reads the rollout on from Offset, whole
// records only, and keeps where it got to, so a scan repeated as the
// file grows reads each record once.
type DrainScan struct {
	Path   string
	Marker string
	Offset int64
	// queued are the turns the queue triggered, seen so far.
	queued map[string]bool
}

// Scan reads what the rollout gained since the last scan and reports
// whether the marker was drained. The file must not have shrunk.
func (d *DrainScan) Scan() (bool, error) {
	if err := home.CheckUnshared("rollout", d.Path, false); err != nil {
		return false, err
	}
	f, err := open(d.Path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, errs.IO(err, "stat rollout %s", d.Path)
	}
	if st.Size() < d.Offset {
		return false, errs.New(errs.ESTALE, "rollout %s is %d bytes, shorter than the %d read", d.Path, st.Size(), d.Offset)
	}
	if _, err := f.Seek(d.Offset, io.SeekStart); err != nil {
		return false, errs.IO(err, "seek rollout %s", d.Path)
	}
	if d.queued == nil {
		d.queued = map[string]bool{}
	}
	br := bufio.NewReaderSize(io.LimitReader(f, st.Size()-d.Offset), 64<<10)
	marker := []byte(d.Marker)
	for {
		rec, n, whole, err := next(br)
		if err != nil {
			return false, errs.IO(err, "read rollout %s", d.Path)
		}
		if !whole {
			return false, nil // a record still being written: read it next time
		}
		d.Offset += n
		if rec != nil && d.record(rec, marker) {
			return true, nil
		}
	}
}

// next returns the next whole record (without its newline) and the bytes
// it took; a record over MaxRecord is read through and returned nil.
// whole is false at the end of what was written so far.
func next(br *bufio.Reader) (rec []byte, n int64, whole bool, err error) {
	var buf []byte
	over := false
	for {
		chunk, err := br.ReadSlice('\n')
		n += int64(len(chunk))
		if !over {
			if int64(len(buf)+len(chunk)) > MaxRecord {
				over, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		switch {
		case err == nil:
			if over {
				return nil, n, true, nil
			}
			return bytes.TrimRight(buf, "\r\n"), n, true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, 0, false, nil
		default:
			return nil, 0, false, err
		}
	}
}

// record takes one rollout record in: a queue-triggered turn's start is
// remembered; a user message of such a turn holding marker is the drain.
func (d *DrainScan) record(rec, marker []byte) bool {
	isStart := bytes.Contains(rec, []byte(`"task_started"`))
	if !isStart && !bytes.Contains(rec, marker) {
		return false
	}
	var r struct {
		Type    string `json:"type"`
		Payload struct {
			Type   string `json:"type"`
			TurnID string `json:"turn_id"`
			Attrib struct {
				Trigger string `json:"turn_trigger"`
			} `json:"turn_attribution"`
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
			Meta struct {
				TurnID string `json:"turn_id"`
			} `json:"internal_chat_message_metadata_passthrough"`
		} `json:"payload"`
	}
	if json.Unmarshal(rec, &r) != nil {
		return false
	}
	p := r.Payload
	switch {
	case r.Type == "event_msg" && p.Type == "task_started":
		if p.Attrib.Trigger == "queue" {
			d.queued[p.TurnID] = true
		}
	case r.Type == "response_item" && p.Type == "message" && p.Role == "user" && d.queued[p.Meta.TurnID]:
		for _, c := range p.Content {
			if c.Type == "input_text" && strings.Contains(c.Text, d.Marker) {
				return true
			}
		}
	}
	return false
}
