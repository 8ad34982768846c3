package object

import (
	"slices"
	"strings"

	"github.com/cbth-dev/cbth/internal/errs"
)

// StableCaps is the capability vocabulary. tool_call_syntax only says the
// stream may hold tool_call events; it grants nothing.
var stableCaps = []string{
	"chat", "stream", "session", "vision", "audio_input", "audio_output",
	"json_schema", "tool_call_syntax", "reasoning", "embedding", "rerank",
}

// providerPrivate words name an API format or native state; they would leak
// adapter detail into the ABI.
var providerPrivate = []string{
	"openai_responses", "anthropic_messages", "gemini_generate_content",
	"native_thread", "native_stateful", "native_stateless",
}

// StableCaps returns the vocabulary in its canonical order.
func StableCaps() []string { return append([]string(nil), stableCaps...) }

// ValidateCaps accepts only stable words, each once.
func ValidateCaps(caps []string) error {
	seen := map[string]bool{}
	for _, c := range caps {
		if seen[c] {
			return errs.New(errs.EINVAL, "capability %q listed twice", c)
		}
		seen[c] = true
		if slices.Contains(providerPrivate, c) {
			return errs.New(errs.EINVAL, "capability %q is provider-private and not part of the ABI", c)
		}
		if !slices.Contains(stableCaps, c) {
			return errs.New(errs.EINVAL, "unknown capability %q", c)
		}
	}
	return nil
}

// ParseCaps reads a .d/cap file: one word per line.
func ParseCaps(text string) ([]string, error) {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	if err := ValidateCaps(out); err != nil {
		return nil, err
	}
	return out, nil
}

// RenderCaps writes one word per line.
func RenderCaps(caps []string) string {
	if len(caps) == 0 {
		return ""
	}
	return strings.Join(caps, "\n") + "\n"
}
