package stream

import (
	"encoding/json"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Encode renders one event as a JSONL line (with the trailing newline):
// json.Marshal's bytes, so raw tool-call arguments are validated and
// compacted, and <, >, &, U+2028 and U+2029 are escaped.
func Encode(e Event) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, errs.Wrap(errs.EINTERNAL, err, "encode %s event", e.Type)
	}
	return append(b, '\n'), nil
}
