package driver

import (
	"encoding/json"
	"strings"

	"github.com/cbth-dev/cbth/internal/errs"
)

// ToolDef is a tool a request offers the model: its canonical name (a
// tool object's name, such as fs.read), what it does, and the JSON Schema
// of its arguments object. Drivers send it in their provider's own shape.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Schema returns the parameters schema decoded as an object; a tool with
// none takes an empty object.
func (d ToolDef) Schema() (map[string]any, error) {
	s := map[string]any{}
	if len(d.Parameters) > 0 {
		if err := json.Unmarshal(d.Parameters, &s); err != nil || s == nil {
			return nil, errs.New(errs.EINVAL, "tool %s: parameters must be a JSON Schema object", d.Name)
		}
	}
	if _, ok := s["type"]; !ok {
		s["type"] = "object"
	}
	if _, ok := s["properties"]; !ok {
		s["properties"] = map[string]any{}
	}
	return s, nil
}

// ToolNames maps canonical tool names to the names a provider accepts.
// OpenAI and Anthropic allow only [A-Za-z0-9_-] in a function name, and
// canonical names have dots (fs.read), so a driver sends fs_read and maps
// the model's calls back. The map is built from the request's tools, so
// the mapping is exact; two tools that would share a wire name are EINVAL.
type ToolNames struct {
	toWire   map[string]string
	fromWire map[string]string
}

// WireName is the provider-safe form of a tool name: every character
// outside [A-Za-z0-9_-] becomes '_'.
func WireName(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, name)
}

// NewToolNames builds the mapping for a request's tools.
func NewToolNames(defs []ToolDef) (ToolNames, error) {
	n := ToolNames{toWire: map[string]string{}, fromWire: map[string]string{}}
	for _, d := range defs {
		w := WireName(d.Name)
		if prev, ok := n.fromWire[w]; ok && prev != d.Name {
			return n, errs.New(errs.EINVAL, "tools %s and %s have the same wire name %s", prev, d.Name, w)
		}
		n.toWire[d.Name], n.fromWire[w] = w, d.Name
	}
	return n, nil
}

// Wire gives the name to send for a canonical name.
func (n ToolNames) Wire(name string) string {
	if w, ok := n.toWire[name]; ok {
		return w
	}
	return WireName(name)
}

// Canonical gives the canonical name of a name the model called; a name
// no offered tool has comes back unchanged (the agent then refuses it).
func (n ToolNames) Canonical(wire string) string {
	if c, ok := n.fromWire[wire]; ok {
		return c
	}
	return wire
}

// ArgsObject decodes a call's arguments for providers that take them as
// an object (Anthropic, Gemini); empty or invalid arguments give {}.
func ArgsObject(raw json.RawMessage) map[string]any {
	m := map[string]any{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil || m == nil {
			return map[string]any{}
		}
	}
	return m
}
