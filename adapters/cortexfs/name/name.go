// Package name validates CortexFS path components: agent and tool names,
// and the two components of a model identity (provider/model). A name that
// passes here is safe to join into a path under the ctx root.
package name

import (
	"strings"

	"github.com/cbth-dev/cbth/engine/errs"
)

// MaxLen is the longest component: one leading character and up to 63 more.
const MaxLen = 64

// Reserved suffixes would collide with the socket entry and control
// directory of a sibling object.
var reservedSuffixes = []string{".sock", ".d"}

// Valid reports whether s is a legal path component. The error carries
// EINVAL and says what is wrong without echoing control bytes back.
func Valid(s string) error {
	if s == "" {
		return errs.New(errs.EINVAL, "name is empty")
	}
	if len(s) > MaxLen {
		return errs.New(errs.EINVAL, "name is longer than %d bytes", MaxLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isAlnum(c):
		case i > 0 && (c == '.' || c == '_' || c == '+' || c == '-'):
		case i == 0:
			return errs.New(errs.EINVAL, "name must start with a letter or digit")
		default:
			return errs.New(errs.EINVAL, "name has a forbidden byte 0x%02x at offset %d", c, i)
		}
	}
	for _, suf := range reservedSuffixes {
		if strings.HasSuffix(s, suf) {
			return errs.New(errs.EINVAL, "name %q ends with the reserved suffix %s", s, suf)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ModelID is the stable identity of a model: two components.
type ModelID struct {
	Provider string
	Model    string
}

func (m ModelID) String() string { return m.Provider + "/" + m.Model }

// ParseModel splits "provider/model" and validates both components.
func ParseModel(s string) (ModelID, error) {
	p, m, ok := strings.Cut(s, "/")
	if !ok {
		return ModelID{}, errs.New(errs.EINVAL, "model identity %q is not provider/model", s)
	}
	if err := Valid(p); err != nil {
		return ModelID{}, errs.Wrap(errs.EINVAL, err, "provider of %q", s)
	}
	if err := Valid(m); err != nil {
		return ModelID{}, errs.Wrap(errs.EINVAL, err, "model of %q", s)
	}
	return ModelID{Provider: p, Model: m}, nil
}

// ProviderFromBaseURL turns a custom base URL into the provider component
// used when no original provider is declared: the host name alone, without
// scheme, port, path or case differences.
//
// It reads the URL itself instead of through net/url: linking net/url
// brings net/netip, whose package init starts a goroutine of the unique
// package, and together they cost some 0.15 ms at every start of cbth
// (measured on empty programs), which runs for every job command and object
// run. It accepts what net/url accepts, checked by a differential fuzz
// test: scheme "://" host [":" port] and then a path, query and fragment
// under net/url's rules.
// Three things net/url would take are refused: user information
// ("user:pw@" would put a credential into the object's files), %-escapes
// in the host, and control bytes after the '#'.
func ProviderFromBaseURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return "", errs.New(errs.EINVAL, "base URL %q is not scheme://host/...", printable(s))
	}
	if scheme = strings.ToLower(scheme); scheme != "http" && scheme != "https" {
		return "", errs.New(errs.EINVAL, "base URL must be http or https")
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if strings.Contains(authority, "@") {
		return "", errs.New(errs.EINVAL, "base URL carries user information; credentials belong in the environment or the keychain")
	}
	host, port, _ := strings.Cut(authority, ":")
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return "", errs.New(errs.EINVAL, "base URL port %q is not a number", printable(port))
		}
	}
	if err := checkURLTail(tail); err != nil {
		return "", err
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return "", errs.New(errs.EINVAL, "base URL has no host")
	}
	if err := Valid(host); err != nil {
		return "", errs.Wrap(errs.EINVAL, err, "host of base URL")
	}
	return host, nil
}

// checkURLTail applies net/url's checks to what follows the host: no
// control byte anywhere, and in the path and the fragment (not the query,
// which net/url keeps raw) every '%' starts a two-digit hex escape.
func checkURLTail(t string) error {
	for i := 0; i < len(t); i++ {
		if c := t[i]; c < ' ' || c == 0x7f {
			return errs.New(errs.EINVAL, "base URL has a forbidden byte 0x%02x", c)
		}
	}
	rest, fragment, _ := strings.Cut(t, "#")
	path, _, _ := strings.Cut(rest, "?")
	for _, part := range []string{path, fragment} {
		for i := 0; i < len(part); i++ {
			if part[i] == '%' && (i+2 >= len(part) || !isHex(part[i+1]) || !isHex(part[i+2])) {
				return errs.New(errs.EINVAL, "base URL has a broken %%-escape")
			}
		}
	}
	return nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// printable keeps error messages free of control bytes from the input.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, s)
}
