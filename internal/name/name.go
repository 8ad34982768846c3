// Package name validates CortexFS path components: agent and tool names,
// and the two components of a model identity (provider/model). A name that
// passes here is safe to join into a path under the ctx root.
package name

import (
	"net/url"
	"strings"

	"github.com/cbth-dev/cbth/internal/errs"
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
// scheme, port, path or case differences. User information ("user:pw@") is
// refused: it would put a credential into the object's files.
func ProviderFromBaseURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		// Not err's text: it quotes the whole URL, which may hold a secret.
		return "", errs.New(errs.EINVAL, "base URL does not parse as a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", errs.New(errs.EINVAL, "base URL must be http or https")
	}
	if u.User != nil {
		return "", errs.New(errs.EINVAL, "base URL carries user information; credentials belong in the environment or the keychain")
	}
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if host == "" {
		return "", errs.New(errs.EINVAL, "base URL has no host")
	}
	if err := Valid(host); err != nil {
		return "", errs.Wrap(errs.EINVAL, err, "host of base URL")
	}
	return host, nil
}
