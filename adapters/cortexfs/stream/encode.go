package stream

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/cbth-dev/cbth/engine/errs"
)

// Encode renders one event as a JSONL line (with the trailing newline).
// The bytes are exactly those of json.Marshal (TestEncodeMatchesMarshal);
// the hand-written path exists because the first reflective Marshal of a
// process costs a tenth of a millisecond, paid by every one-shot object
// run. Events with tool-call arguments take the json.Marshal path, which
// also validates and compacts the raw arguments.
func Encode(e Event) ([]byte, error) {
	if len(e.Arguments) > 0 {
		b, err := json.Marshal(e)
		if err != nil {
			return nil, errs.Wrap(errs.EINTERNAL, err, "encode %s event", e.Type)
		}
		return append(b, '\n'), nil
	}
	b := make([]byte, 0, 96+len(e.Text)+len(e.Message)+contentLen(e.Content))
	b = append(b, `{"type":`...)
	b = appendString(b, e.Type)
	b = field(b, "id", e.ID)
	b = field(b, "run", e.Run)
	b = field(b, "model", e.Model)
	b = field(b, "role", e.Role)
	b = field(b, "text", e.Text)
	if len(e.Content) > 0 {
		b = append(b, `,"content":[`...)
		for i, p := range e.Content {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":`...)
			b = appendString(b, p.Type)
			b = append(b, `,"text":`...)
			b = appendString(b, p.Text)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = field(b, "call_id", e.CallID)
	b = field(b, "name", e.Name)
	if e.InputTokens != nil {
		b = append(b, `,"input_tokens":`...)
		b = strconv.AppendInt(b, *e.InputTokens, 10)
	}
	if e.OutputTokens != nil {
		b = append(b, `,"output_tokens":`...)
		b = strconv.AppendInt(b, *e.OutputTokens, 10)
	}
	b = field(b, "code", string(e.Code))
	b = field(b, "message", e.Message)
	b = field(b, "status", e.Status)
	return append(b, '}', '\n'), nil
}

func contentLen(ps []Part) int {
	n := 0
	for _, p := range ps {
		n += 24 + len(p.Type) + len(p.Text)
	}
	return n
}

// field appends ,"key":"value" unless value is empty (omitempty).
func field(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendString(b, v)
}

const hex = "0123456789abcdef"

// appendString quotes s as encoding/json does with HTML escaping on:
// <, > and & as \u003c \u003e \u0026, U+2028 and U+2029 escaped, invalid
// UTF-8 as \ufffd, control characters as \b \f \n \r \t or \u00XX.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
