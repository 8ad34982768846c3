package object

import (
	"strings"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Controls renders the control files of o, by file name.
func Controls(o Object) map[string]string {
	line := func(s string) string {
		if s == "" {
			return ""
		}
		return s + "\n"
	}
	m := map[string]string{
		FileID:      line(o.NativeID),
		FileDriver:  o.Driver.String(),
		FileCap:     RenderCaps(o.Caps),
		FileDefault: RenderDefaults(o.Defaults),
		FileSession: line(o.Session),
		FileStatus:  line(o.Status),
		FileLog:     line(o.Log),
	}
	if o.Kind == KindAgent {
		m[FileModel] = line(o.Model)
		m[FileTools] = ""
		for _, t := range o.Tools {
			m[FileTools] += t + "\n"
		}
		m[FileRoot] = line(o.Root)
		m[FileCwd] = line(o.Cwd)
		m[FileDelivery] = line(o.Delivery)
	}
	return m
}

// AgentFiles are the control files only agents have.
var AgentFiles = []string{FileModel, FileTools, FileRoot, FileCwd, FileDelivery}

// FromFiles rebuilds an object from its metadata file and control files
// (by file name; a missing file is an empty string).
func FromFiles(kind, rel string, metaFile []byte, ctl map[string]string) (Object, error) {
	_, meta, err := ParseMeta(metaFile)
	if err != nil {
		return Object{}, err
	}
	o := Object{Kind: kind, Path: rel, Meta: meta,
		NativeID: strings.TrimSpace(ctl[FileID]),
		Session:  strings.TrimSpace(ctl[FileSession]),
		Status:   strings.TrimSpace(ctl[FileStatus]),
		// .d/log is the calls' record (adapters/cortexfs/tree.RecordCall),
		// many lines, not a registered value: it is not read back.
	}
	if o.Session == "" {
		o.Session = SessionNone
	}
	if kind == KindAgent {
		o.Model, o.Root, o.Cwd = strings.TrimSpace(ctl[FileModel]), strings.TrimSpace(ctl[FileRoot]), strings.TrimSpace(ctl[FileCwd])
		o.Tools = strings.Fields(ctl[FileTools])
		o.Delivery = strings.TrimSpace(ctl[FileDelivery])
	}
	if kind != KindModel && strings.TrimSpace(ctl[FileDriver]) == "" {
		o.Driver = nil
	} else if o.Driver, err = ParseRoutes(ctl[FileDriver]); err != nil {
		return Object{}, errs.Wrap(errs.EINVAL, err, "%s/%s.d/driver", kind, rel)
	}
	if o.Caps, err = ParseCaps(ctl[FileCap]); err != nil {
		return Object{}, errs.Wrap(errs.EINVAL, err, "%s/%s.d/cap", kind, rel)
	}
	if o.Defaults, err = ParseDefaults(ctl[FileDefault]); err != nil {
		return Object{}, errs.Wrap(errs.EINVAL, err, "%s/%s.d/default", kind, rel)
	}
	return o, o.Validate()
}

// DebugEcho is the built-in local model: it echoes the last user message.
func DebugEcho() Object {
	return Object{
		Kind: KindModel, Path: "debug/echo",
		Meta: Meta{ID: "debug/echo", Name: "echo", Description: "local debug model: echoes the last user message",
			Type: KindModel, OwnedBy: "debug"},
		NativeID: "echo",
		Driver:   Routes{RouteDefault: {"debug"}},
		Caps:     []string{"chat", "stream"},
		Session:  SessionNone,
		Status:   "ready",
	}
}
