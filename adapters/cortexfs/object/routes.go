package object

import (
	"sort"
	"strings"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Route keys of the driver route table.
const (
	RouteDefault = "default"
	RouteExec    = "exec"
	RouteSocket  = "socket"
	RouteAgent   = "agent"
)

var routeKeys = map[string]bool{RouteDefault: true, RouteExec: true, RouteSocket: true, RouteAgent: true}

// Routes maps a use case to its driver priority list.
type Routes map[string][]string

// ParseRoutes reads a .d/driver file. One bare driver name is the legacy
// form and means default=<name>. Otherwise every non-empty line is
// key=name[,name...].
func ParseRoutes(text string) (Routes, error) {
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return nil, errs.New(errs.EINVAL, "driver table is empty")
	}
	r := Routes{}
	if len(lines) == 1 && !strings.Contains(lines[0], "=") {
		if err := validDriverName(lines[0]); err != nil {
			return nil, err
		}
		r[RouteDefault] = []string{lines[0]}
		return r, nil
	}
	for _, l := range lines {
		k, v, ok := strings.Cut(l, "=")
		k = strings.TrimSpace(k)
		if !ok {
			return nil, errs.New(errs.EINVAL, "driver route %q is not key=drivers", l)
		}
		if !routeKeys[k] {
			return nil, errs.New(errs.EINVAL, "unknown driver route key %q", k)
		}
		if _, dup := r[k]; dup {
			return nil, errs.New(errs.EINVAL, "driver route %q given twice", k)
		}
		var list []string
		for _, d := range strings.Split(v, ",") {
			d = strings.TrimSpace(d)
			if err := validDriverName(d); err != nil {
				return nil, err
			}
			list = append(list, d)
		}
		r[k] = list
	}
	return r, nil
}

// Validate checks keys and driver names.
func (r Routes) Validate() error {
	for k, list := range r {
		if !routeKeys[k] {
			return errs.New(errs.EINVAL, "unknown driver route key %q", k)
		}
		if len(list) == 0 {
			return errs.New(errs.EINVAL, "driver route %q is empty", k)
		}
		for _, d := range list {
			if err := validDriverName(d); err != nil {
				return err
			}
		}
	}
	return nil
}

// Resolve gives the drivers to try for a use case, best first: the use
// case's own list, then the default list, without repeats.
func (r Routes) Resolve(use string) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range []string{use, RouteDefault} {
		for _, d := range r[k] {
			if !seen[d] {
				seen[d] = true
				out = append(out, d)
			}
		}
	}
	return out
}

// String renders the table. A table with only a one-driver default renders
// in the legacy single-name form; otherwise keys come in a fixed order.
func (r Routes) String() string {
	if len(r) == 0 {
		return ""
	}
	if len(r) == 1 && len(r[RouteDefault]) == 1 {
		return r[RouteDefault][0] + "\n"
	}
	var keys []string
	for k := range r {
		keys = append(keys, k)
	}
	order := map[string]int{RouteDefault: 0, RouteExec: 1, RouteSocket: 2, RouteAgent: 3}
	sort.Slice(keys, func(i, j int) bool { return order[keys[i]] < order[keys[j]] })
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + strings.Join(r[k], ",") + "\n")
	}
	return b.String()
}

// validDriverName: adapter names are lower-case words joined by '-'.
func validDriverName(d string) error {
	if d == "" || len(d) > 64 {
		return errs.New(errs.EINVAL, "driver name %q is empty or too long", d)
	}
	for i := 0; i < len(d); i++ {
		c := d[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || i > 0 && c == '-') {
			return errs.New(errs.EINVAL, "driver name %q may hold only a-z, 0-9 and '-'", d)
		}
	}
	return nil
}
