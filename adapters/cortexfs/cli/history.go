package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cbth-dev/cbth/adapters/cortexfs/session"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
	"github.com/cbth-dev/cbth/projections/ctxsession"
)

// History is read from the session files themselves (the projection the
// daemon keeps): reading needs no daemon, and what it shows is what
// `less messages.jsonl` shows.

// sessionsDir is where an object's private sessions are: OBJ is an agent
// name, agent/<name>, or model/<provider>/<model>.
func sessionsDir(env *Env, obj string) (string, error) {
	uid := strconv.Itoa(env.UID)
	if rest, ok := strings.CutPrefix(obj, "model/"); ok {
		id, err := name.ParseModel(rest)
		if err != nil {
			return "", err
		}
		return filepath.Join(env.CtxRoot, "home", uid, "model", id.Provider, id.Model+".d", "session"), nil
	}
	nm := strings.TrimPrefix(obj, "agent/")
	if err := name.Valid(nm); err != nil {
		return "", err
	}
	return filepath.Join(env.CtxRoot, "home", uid, "agent", nm, "session"), nil
}

// pickSession is sess, else index/current, else default.
func pickSession(dir, sess string) (string, error) {
	if sess != "" {
		if err := name.Valid(sess); err != nil {
			return "", err
		}
		return sess, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, ctxsession.DirIndex, "current"))
	if cur := strings.TrimSpace(string(b)); err == nil && cur != "" {
		return cur, nil
	}
	return "default", nil
}

func readSessionFile(dir, sess, file string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dir, sess, file))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errs.New(errs.ENOENT, "no session %s in %s", sess, dir)
	}
	if err != nil {
		return nil, errs.Wrap(errs.EACCES, err, "read %s", file)
	}
	return b, nil
}

// SessionArgs names one session of an object: what `ctx history` and
// `ctx latest` share.
type SessionArgs struct {
	Object  string `arg:"" help:"Agent name (or agent/NAME, model/PROVIDER/MODEL)."`
	Session string `help:"Session name (default: the index's current session)."`
}

// read returns the chosen session's name and the named file of it.
func (a SessionArgs) read(env *Env, file string) (string, []byte, error) {
	dir, err := sessionsDir(env, a.Object)
	if err != nil {
		return "", nil, err
	}
	sess, err := pickSession(dir, a.Session)
	if err != nil {
		return "", nil, err
	}
	b, err := readSessionFile(dir, sess, file)
	return sess, b, err
}

// HistoryCmd is `ctx history`.
type HistoryCmd struct {
	SessionArgs `embed:""`
}

// Run implements the command.
func (c *HistoryCmd) Run(env *Env) error {
	sess, b, err := c.read(env, ctxsession.FileMessages)
	if err != nil {
		return err
	}
	recs := []session.Record{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var r session.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return errs.Wrap(errs.ECORRUPT, err, "messages of %s", sess)
		}
		recs = append(recs, r)
	}
	return env.emit(env.JSON, map[string]any{"session": sess, "messages": recs}, func(w io.Writer) {
		for _, r := range recs {
			switch {
			case len(r.ToolCalls) > 0:
				for _, tc := range r.ToolCalls {
					fmt.Fprintf(w, "%s: [tool call %s %s]\n", r.Role, tc.Name, tc.Arguments)
				}
			case r.Role == "tool":
				fmt.Fprintf(w, "tool %s: %s\n", r.Name, r.Content)
			default:
				fmt.Fprintf(w, "%s: %s\n", r.Role, r.Content)
			}
		}
	})
}

// LatestCmd is `ctx latest`.
type LatestCmd struct {
	SessionArgs `embed:""`
}

// Run implements the command.
func (c *LatestCmd) Run(env *Env) error {
	sess, b, err := c.read(env, ctxsession.FileLatest)
	if err != nil {
		return err
	}
	return env.emit(env.JSON, map[string]string{"session": sess, "latest": string(b)}, func(w io.Writer) {
		fmt.Fprint(w, string(b))
		if len(b) > 0 && b[len(b)-1] != '\n' {
			fmt.Fprintln(w)
		}
	})
}

// SessionCmd groups `ctx session`.
type SessionCmd struct {
	List SessionListCmd `cmd:"" help:"List an object's sessions, newest first (its session/index/list)."`
	Show SessionShowCmd `cmd:"" help:"Show one session: state, cwd, times, meta, message count, latest answer."`
}

// SessionInfo is one session as list and show print it.
type SessionInfo struct {
	Session   string          `json:"session"`
	State     string          `json:"state"`
	Cwd       string          `json:"cwd"`
	CreatedAt string          `json:"created_at"`
	UpdatedAt string          `json:"updated_at"`
	Messages  int             `json:"messages"`
	Meta      json.RawMessage `json:"meta"`
	Latest    string          `json:"latest,omitempty"`
	Dir       string          `json:"dir"`
}

func sessionInfo(dir, sess string) (SessionInfo, error) {
	si := SessionInfo{Session: sess, Dir: filepath.Join(dir, sess)}
	read := func(f string) string {
		b, _ := os.ReadFile(filepath.Join(dir, sess, f))
		return strings.TrimRight(string(b), "\n")
	}
	if _, err := readSessionFile(dir, sess, ctxsession.FileState); err != nil {
		return si, err
	}
	si.State, si.Cwd, si.CreatedAt, si.UpdatedAt = read(ctxsession.FileState), read(ctxsession.FileCwd), read(ctxsession.FileCreatedAt), read(ctxsession.FileUpdatedAt)
	si.Meta = json.RawMessage(read(ctxsession.FileMeta))
	if !json.Valid(si.Meta) {
		si.Meta = json.RawMessage("{}")
	}
	si.Messages = max(session.CountLines(filepath.Join(dir, sess, ctxsession.FileMessages)), 0)
	return si, nil
}

// SessionListCmd is `ctx session list`.
type SessionListCmd struct {
	Object string `arg:"" help:"Agent name (or agent/NAME, model/PROVIDER/MODEL)."`
}

// Run implements the command.
func (c *SessionListCmd) Run(env *Env) error {
	dir, err := sessionsDir(env, c.Object)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, ctxsession.DirIndex, "list"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errs.Wrap(errs.EACCES, err, "read the session index")
	}
	rows := []SessionInfo{}
	for _, s := range strings.Fields(string(b)) {
		si, err := sessionInfo(dir, s)
		if err != nil {
			return err
		}
		rows = append(rows, si)
	}
	return env.emit(env.JSON, rows, func(w io.Writer) {
		for _, r := range rows {
			fmt.Fprintf(w, "%-24s %-6s %-32s %s\n", r.Session, r.State, r.UpdatedAt, r.Cwd)
		}
	})
}

// SessionShowCmd is `ctx session show`.
type SessionShowCmd struct {
	Object  string `arg:"" help:"Agent name (or agent/NAME, model/PROVIDER/MODEL)."`
	Session string `arg:"" help:"Session name."`
}

// Run implements the command.
func (c *SessionShowCmd) Run(env *Env) error {
	dir, err := sessionsDir(env, c.Object)
	if err != nil {
		return err
	}
	if err := name.Valid(c.Session); err != nil {
		return err
	}
	si, err := sessionInfo(dir, c.Session)
	if err != nil {
		return err
	}
	b, _ := os.ReadFile(filepath.Join(dir, c.Session, ctxsession.FileLatest))
	si.Latest = string(b)
	return env.emit(env.JSON, si, func(w io.Writer) {
		fmt.Fprintf(w, "session  %s\nstate    %s\ncwd      %s\ncreated  %s\nupdated  %s\nmessages %d\nmeta     %s\ndir      %s\n", si.Session, si.State, si.Cwd, si.CreatedAt, si.UpdatedAt, si.Messages, si.Meta, si.Dir)
		if si.Latest != "" {
			fmt.Fprintf(w, "latest\n%s\n", strings.TrimRight(si.Latest, "\n"))
		}
	})
}
