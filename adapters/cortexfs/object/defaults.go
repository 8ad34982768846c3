package object

import (
	"strings"

	"github.com/cbth-dev/cbth/internal/errs"
)

// KV is one KEY=VALUE line of .d/default.
type KV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// secretish key fragments: defaults are world-inspectable, so a key that
// looks like it holds a credential is refused outright.
var secretish = []string{"key", "token", "secret", "password", "credential", "auth"}

// keyWhitelist are keys that contain a secret-ish fragment but only name
// where a credential lives, never the credential itself.
var keyWhitelist = map[string]bool{"api_key_env": true, "max_tokens": true}

// Validate checks the key syntax and refuses secret-looking keys.
func (kv KV) Validate() error {
	k := kv.Key
	if k == "" || len(k) > 64 {
		return errs.New(errs.EINVAL, "default key is empty or too long")
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '.' || c == '-')) {
			return errs.New(errs.EINVAL, "default key %q has a forbidden character", k)
		}
	}
	if lk := strings.ToLower(k); !keyWhitelist[lk] {
		for _, s := range secretish {
			if strings.Contains(lk, s) {
				return errs.New(errs.EINVAL, "default key %q looks like a secret; credentials live in the environment or keychain", k)
			}
		}
	}
	if strings.ContainsAny(kv.Value, "\n\r\x00") {
		return errs.New(errs.EINVAL, "default %q value must be one line", k)
	}
	return nil
}

// ParseKV parses "KEY=VALUE".
func ParseKV(s string) (KV, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return KV{}, errs.New(errs.EINVAL, "default %q is not KEY=VALUE", s)
	}
	kv := KV{Key: strings.TrimSpace(k), Value: v}
	return kv, kv.Validate()
}

// ParseDefaults reads a .d/default file; later lines win over earlier ones
// with the same key, keeping the first position.
func ParseDefaults(text string) ([]KV, error) {
	var out []KV
	idx := map[string]int{}
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		kv, err := ParseKV(l)
		if err != nil {
			return nil, err
		}
		if i, ok := idx[kv.Key]; ok {
			out[i] = kv
			continue
		}
		idx[kv.Key] = len(out)
		out = append(out, kv)
	}
	return out, nil
}

// RenderDefaults writes one KEY=VALUE per line.
func RenderDefaults(kvs []KV) string {
	var b strings.Builder
	for _, kv := range kvs {
		b.WriteString(kv.Key + "=" + kv.Value + "\n")
	}
	return b.String()
}

// Lookup returns the value of key.
func Lookup(kvs []KV, key string) (string, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}
