// Package object holds the CortexFS object record and the text formats of
// its files: the metadata file (runner shebang + key=value lines) and the
// control files under name.d/ (id, driver, cap, default, session, status,
// log). It parses and renders; writing to disk belongs to package tree.
package object

import (
	"bufio"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// Kinds of objects, each the top directory it lives under.
const (
	KindModel = "model"
	KindAgent = "agent"
	KindTool  = "tool"
)

// Session modes of .d/session.
const (
	SessionNone   = "none"
	SessionSocket = "socket"
)

// Control file names under name.d/.
const (
	FileID      = "id"
	FileDriver  = "driver"
	FileCap     = "cap"
	FileDefault = "default"
	FileSession = "session"
	FileStatus  = "status"
	FileLog     = "log"
	// Agents only: the model it calls (provider/model), the tools it may
	// run (one per line), its root directory and default cwd, and which
	// job results the ctx target may deliver to it (FileDelivery).
	FileModel    = "model"
	FileTools    = "tools"
	FileRoot     = "root"
	FileCwd      = "cwd"
	FileDelivery = "delivery"
)

// TrustedAll in an agent's .d/delivery lets the ctx target deliver it
// any job result, whatever the batch's delivery policy; empty (the
// default) keeps an agent that can act (shell.exec, fs.write) to
// read-only results that need no approval.
const TrustedAll = "trusted_all"

// Meta is the inspectable metadata of the executable file. The keys follow
// a provider model listing: id, name, description, type, created_at,
// owned_by, context_length.
type Meta struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	Description   string `json:"description,omitempty"`
	Type          string `json:"type"`
	CreatedAt     string `json:"created_at,omitempty"`
	OwnedBy       string `json:"owned_by,omitempty"`
	ContextLength int64  `json:"context_length,omitempty"`
}

// Object is one object of the tree as plain data, so a projection can build
// it from events and the materializer can write it.
type Object struct {
	Kind string `json:"kind"`
	// Path below the kind directory: "provider/model" for models, one
	// component for agents and tools.
	Path     string   `json:"path"`
	Meta     Meta     `json:"meta"`
	NativeID string   `json:"native_id"`
	Driver   Routes   `json:"driver"`
	Caps     []string `json:"cap"`
	Defaults []KV     `json:"default"`
	Session  string   `json:"session"`
	Status   string   `json:"status"`
	Log      string   `json:"log"`
	// Agents only (.d/model, .d/tools, .d/root, .d/cwd). Root empty means
	// home/<uid>/agent/<name>/root under the tree; Cwd empty means "/".
	Model    string   `json:"model,omitempty"`
	Tools    []string `json:"tools,omitempty"`
	Root     string   `json:"root,omitempty"`
	Cwd      string   `json:"cwd,omitempty"`
	Delivery string   `json:"delivery,omitempty"` // "" or TrustedAll
}

// Rel is the object's path relative to the ctx root, e.g. model/openai/gpt-4o.
func (o Object) Rel() string { return path.Join(o.Kind, o.Path) }

// Validate checks the record against the naming and content rules.
func (o Object) Validate() error {
	switch o.Kind {
	case KindModel:
		if _, err := name.ParseModel(o.Path); err != nil {
			return err
		}
	case KindAgent, KindTool:
		if err := name.Valid(o.Path); err != nil {
			return err
		}
	default:
		return errs.New(errs.EINVAL, "unknown object kind %q", o.Kind)
	}
	if o.Session != SessionNone && o.Session != SessionSocket {
		return errs.New(errs.EINVAL, "session must be none or socket, not %q", o.Session)
	}
	if err := oneLine("id", o.NativeID); err != nil {
		return err
	}
	// Models need a driver; agents and tools dispatch inside the runner.
	if o.Kind == KindModel && len(o.Driver) == 0 {
		return errs.New(errs.EINVAL, "%s has no driver", o.Rel())
	}
	if o.Kind == KindAgent {
		if _, err := name.ParseModel(o.Model); err != nil {
			return errs.Wrap(errs.EINVAL, err, "agent %s model", o.Path)
		}
		for _, t := range o.Tools {
			if err := name.Valid(t); err != nil {
				return errs.Wrap(errs.EINVAL, err, "agent %s tool", o.Path)
			}
		}
		if o.Root != "" && (!path.IsAbs(o.Root) || path.Clean(o.Root) != o.Root) {
			return errs.New(errs.EINVAL, "agent %s root %q must be a clean absolute path", o.Path, o.Root)
		}
		if o.Cwd != "" && !strings.HasPrefix(o.Cwd, "/") {
			return errs.New(errs.EINVAL, "agent %s cwd %q must start with / (the agent root)", o.Path, o.Cwd)
		}
		for k, v := range map[string]string{"root": o.Root, "cwd": o.Cwd} {
			if err := oneLine(k, v); err != nil {
				return err
			}
		}
		if o.Delivery != "" && o.Delivery != TrustedAll {
			return errs.New(errs.EINVAL, "agent %s delivery %q: empty or %s", o.Path, o.Delivery, TrustedAll)
		}
	} else if o.Model != "" || len(o.Tools) > 0 || o.Root != "" || o.Cwd != "" || o.Delivery != "" {
		return errs.New(errs.EINVAL, "%s: model, tools, root, cwd and delivery are agent files", o.Rel())
	}
	if err := o.Driver.Validate(); err != nil {
		return err
	}
	if err := ValidateCaps(o.Caps); err != nil {
		return err
	}
	for _, kv := range o.Defaults {
		if err := kv.Validate(); err != nil {
			return err
		}
	}
	for k, v := range map[string]string{"status": o.Status, "log": o.Log} {
		if err := oneLine(k, v); err != nil {
			return err
		}
	}
	return o.Meta.validate()
}

func oneLine(field, v string) error {
	if strings.ContainsAny(v, "\n\r\x00") {
		return errs.New(errs.EINVAL, "%s must be one line", field)
	}
	return nil
}

func (m Meta) validate() error {
	for k, v := range map[string]string{"id": m.ID, "name": m.Name, "description": m.Description, "type": m.Type, "created_at": m.CreatedAt, "owned_by": m.OwnedBy} {
		if err := oneLine(k, v); err != nil {
			return err
		}
	}
	if m.Type == "" {
		return errs.New(errs.EINVAL, "metadata has no type")
	}
	return nil
}

// RenderMeta renders the executable file: the runner shebang, then one
// key=value line per metadata field. No code, no secrets.
func RenderMeta(runner string, m Meta) ([]byte, error) {
	if !path.IsAbs(runner) || strings.ContainsAny(runner, " \t\n\x00") {
		return nil, errs.New(errs.EINVAL, "runner path must be absolute and contain no blanks")
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#!%s\n", runner)
	fmt.Fprintf(&b, "id=%s\n", m.ID)
	fmt.Fprintf(&b, "name=%s\n", m.Name)
	fmt.Fprintf(&b, "description=%s\n", m.Description)
	fmt.Fprintf(&b, "type=%s\n", m.Type)
	fmt.Fprintf(&b, "created_at=%s\n", m.CreatedAt)
	fmt.Fprintf(&b, "owned_by=%s\n", m.OwnedBy)
	fmt.Fprintf(&b, "context_length=%d\n", m.ContextLength)
	return []byte(b.String()), nil
}

// ParseMeta reads an executable file back. It returns the runner path of the
// shebang and the metadata. Unknown keys are ignored so newer writers stay
// readable.
func ParseMeta(data []byte) (runner string, m Meta, err error) {
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "#!") {
		return "", Meta{}, errs.New(errs.EINVAL, "object file has no runner shebang")
	}
	runner = strings.TrimSpace(strings.TrimPrefix(sc.Text(), "#!"))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return "", Meta{}, errs.New(errs.EINVAL, "metadata line without '=': %q", line)
		}
		switch k {
		case "id":
			m.ID = v
		case "name":
			m.Name = v
		case "description":
			m.Description = v
		case "type":
			m.Type = v
		case "created_at":
			m.CreatedAt = v
		case "owned_by":
			m.OwnedBy = v
		case "context_length":
			if v != "" {
				n, perr := strconv.ParseInt(v, 10, 64)
				if perr != nil {
					return "", Meta{}, errs.Wrap(errs.EINVAL, perr, "context_length")
				}
				m.ContextLength = n
			}
		}
	}
	if m.Type == "" {
		return "", Meta{}, errs.New(errs.EINVAL, "metadata has no type")
	}
	return runner, m, nil
}
