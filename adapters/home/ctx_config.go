package home

import (
	"strings"

	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/name"
)

// Ctx configures the CortexFS trees the daemon serves.
type Ctx struct {
	// Shared are the shared session spaces. A socket send or resume
	// with scope "shared" is allowed only for an object listed in one;
	// its sessions live under <tree>/shared/<name>/<object>/session/
	// (spec/cortexfs.md, "Scopes").
	Shared []SharedSpace `toml:"shared"`
}

// SharedSpace is one [[ctx.shared]] table.
type SharedSpace struct {
	// Name is one path component: the directory under <tree>/shared/.
	Name string `toml:"name"`
	// Objects are "agent/NAME" or "model/PROVIDER/MODEL".
	Objects []string `toml:"objects"`
}

// SharedSpaces maps each object listed in a shared space to that space's
// name.
func (c Ctx) SharedSpaces() map[string]string {
	m := map[string]string{}
	for _, s := range c.Shared {
		for _, o := range s.Objects {
			m[o] = s.Name
		}
	}
	return m
}

// checkCtx refuses a [[ctx.shared]] table without a valid name, a name
// used twice, an object that is not agent/NAME or model/P/M, and an
// object in two spaces: a send names only the scope, so each object's
// shared sessions must have one place.
func (h Home) checkCtx(c Config) error {
	names := map[string]bool{}
	in := map[string]string{}
	for i, s := range c.Ctx.Shared {
		if err := name.Valid(s.Name); err != nil {
			return errs.Wrap(errs.EINVAL, err, "%s: [[ctx.shared]] #%d: name %q", h.Config(), i+1, s.Name)
		}
		if names[s.Name] {
			return errs.New(errs.EINVAL, "%s: [[ctx.shared]] name %q is used twice", h.Config(), s.Name)
		}
		names[s.Name] = true
		if len(s.Objects) == 0 {
			return errs.New(errs.EINVAL, "%s: [[ctx.shared]] %q lists no objects", h.Config(), s.Name)
		}
		for _, o := range s.Objects {
			if err := validObject(o); err != nil {
				return errs.Wrap(errs.EINVAL, err, "%s: [[ctx.shared]] %q: object %q", h.Config(), s.Name, o)
			}
			if prev, ok := in[o]; ok {
				return errs.New(errs.EINVAL, "%s: [[ctx.shared]] object %q is in both %q and %q; an object may be in one shared space", h.Config(), o, prev, s.Name)
			}
			in[o] = s.Name
		}
	}
	return nil
}

func validObject(o string) error {
	switch {
	case strings.HasPrefix(o, "agent/"):
		return name.Valid(strings.TrimPrefix(o, "agent/"))
	case strings.HasPrefix(o, "model/"):
		_, err := name.ParseModel(strings.TrimPrefix(o, "model/"))
		return err
	}
	return errs.New(errs.EINVAL, "must be agent/NAME or model/PROVIDER/MODEL")
}
