// Package relay is the Codex Desktop transcript relay's file side: the
// envelope a heartbeat prints, and the reader that finds envelopes in a
// Codex rollout file (spec/desktop.md, "The transcript relay").
//
// A heartbeat turn can write nothing and reach no socket; what it can do
// is run a command, and Codex records the command's output in the
// thread's rollout JSONL as a response_item whose payload is a
// function_call_output. So a heartbeat writes back by printing one line,
// the prefix and a JSON envelope, and the daemon reads it there. The same
// text also appears in the heartbeat's prompt and in the model's own
// messages; only a function_call_output counts.
package relay

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Prefix opens every envelope line: the relay format and its version.
const Prefix = "CBTH-RELAY/1 "

// Envelope kinds: the CAS each stands for.
const (
	KindArmPending  = "arm-pending"  // note-arm-pending
	KindArmAccepted = "arm-accepted" // note-arm (the lease is read from the durable attempt)
	// KindPaused is note-paused. Its attempt_id is the arm_pending
	// attempt the proof abandons, or empty for the armed generation.
	KindPaused = "paused"
)

// Kinds lists the envelope kinds.
var Kinds = []string{KindArmPending, KindArmAccepted, KindPaused}

// Envelope is what a heartbeat prints after Prefix. It never carries the
// bridge arm lease: secrets do not pass through prompts or tool output.
type Envelope struct {
	Marker          string `json:"marker"`
	Kind            string `json:"kind"`
	SourceThreadID  string `json:"source_thread_id"`
	AttemptID       string `json:"attempt_id"`
	Generation      uint64 `json:"generation"`
	BridgeRequestID string `json:"bridge_request_id"`
}

// Line is the exact line a heartbeat prints for e.
func Line(e Envelope) string {
	b, _ := json.Marshal(e)
	return Prefix + string(b)
}

var fields = map[string]bool{"marker": true, "kind": true, "source_thread_id": true, "attempt_id": true, "generation": true, "bridge_request_id": true}

// Parse reads the JSON after Prefix. Unknown fields (a lease above all)
// make it malformed, as does a missing one.
func Parse(raw string) (Envelope, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &keys); err != nil {
		return Envelope{}, errs.Wrap(errs.EINVAL, err, "relay envelope")
	}
	for k := range keys {
		if !fields[k] {
			return Envelope{}, errs.New(errs.EINVAL, "relay envelope carries %q, which it must not", k)
		}
	}
	if len(keys) != len(fields) {
		return Envelope{}, errs.New(errs.EINVAL, "relay envelope lacks fields (has %d of %d)", len(keys), len(fields))
	}
	var e Envelope
	if err := json.Unmarshal([]byte(raw), &e); err != nil {
		return Envelope{}, errs.Wrap(errs.EINVAL, err, "relay envelope")
	}
	return e, nil
}

// Found is one envelope in a rollout's tool output.
type Found struct {
	Envelope Envelope
	// SHA256 is the hash of the envelope's JSON as printed: the replay
	// fence (the same envelope printed again hashes the same).
	SHA256 string
	// Line is the rollout line (1-based) of the record holding it.
	Line int64
}

// record is the part of a rollout record the reader needs.
type record struct {
	Type    string `json:"type"`
	Payload struct {
		Type   string          `json:"type"`
		Output json.RawMessage `json:"output"`
	} `json:"payload"`
}

// outputText is a function_call_output's text: a string, or an object
// with a content string (older rollouts), or content items with text.
func outputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil && len(o.Content) > 0 {
		if json.Unmarshal(o.Content, &s) == nil {
			return s
		}
		var items []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(o.Content, &items) == nil {
			var b strings.Builder
			for _, it := range items {
				b.WriteString(it.Text)
				b.WriteByte('\n')
			}
			return b.String()
		}
	}
	return ""
}

// Envelopes returns the envelopes in one rollout record: only a
// response_item carrying a function_call_output counts, and in its text
// only whole lines that start with Prefix and parse. Anything else (a
// prompt, the model's messages, malformed prefixed text) is diagnostic.
func Envelopes(line []byte) []Found {
	if !bytes.Contains(line, []byte("CBTH-RELAY/")) {
		return nil
	}
	var r record
	if json.Unmarshal(line, &r) != nil || r.Type != "response_item" || r.Payload.Type != "function_call_output" {
		return nil
	}
	var out []Found
	for _, l := range strings.Split(outputText(r.Payload.Output), "\n") {
		l = strings.TrimRight(l, "\r")
		raw, ok := strings.CutPrefix(strings.TrimSpace(l), Prefix)
		if !ok {
			continue
		}
		e, err := Parse(raw)
		if err != nil {
			continue
		}
		sum := sha256.Sum256([]byte(raw))
		out = append(out, Found{Envelope: e, SHA256: hex.EncodeToString(sum[:])})
	}
	return out
}

// Limits bound one read of a rollout.
type Limits struct {
	Records int   // complete records
	Bytes   int64 // bytes: no record starts past this many
	// Record is the longest record (its newline included) read whole;
	// a longer one is read through and skipped. 0: no limit.
	Record int64
}

// MaxRecord is the longest rollout record the relay reads whole: far
// more than a tool output holding an envelope (a bridge's print is one
// line), enough for the records Codex writes around it (an image in a
// message, a long command output).
const MaxRecord = 8 << 20

// Skipped is a record longer than Limits.Record: read through, not
// parsed, so an envelope in it is not seen.
type Skipped struct {
	Line  int64 `json:"line"`
	Bytes int64 `json:"bytes"`
}

// Round is what one Read found and where the next one starts.
type Round struct {
	Found   []Found
	Skipped []Skipped
	// Offset and Line are where the next read starts: the byte offset
	// after the last complete record read, and that record's line.
	Offset, Line int64
}

// Read reads complete records from r (positioned at the byte offset
// `offset`, the first record being line `line`+1) up to end, the file
// size captured before, within lim. A record that starts within the
// byte limit is read to its end even past it, whole when it is at most
// lim.Record bytes long, else read through and skipped; an incomplete
// last record is left for the next read. So a long record never stops
// the reader: it moves past it, and says so.
func Read(r io.Reader, offset, line, end int64, lim Limits) (Round, error) {
	out := Round{Offset: offset, Line: line}
	if end <= offset {
		return out, nil
	}
	br := bufio.NewReaderSize(io.LimitReader(r, end-offset), 64<<10)
	records, read := 0, int64(0)
	for (lim.Records <= 0 || records < lim.Records) && (lim.Bytes <= 0 || read < lim.Bytes) {
		b, n, whole, err := next(br, lim.Record)
		if err == io.EOF {
			break // an incomplete record (or none): the next read
		}
		if err != nil {
			return out, errs.IO(err, "read the rollout")
		}
		read += n
		out.Offset += n
		out.Line++
		records++
		if !whole {
			out.Skipped = append(out.Skipped, Skipped{Line: out.Line, Bytes: n})
			continue
		}
		for _, f := range Envelopes(b) {
			f.Line = out.Line
			out.Found = append(out.Found, f)
		}
	}
	return out, nil
}

// next reads one record through its newline: n bytes, kept in rec when
// whole (at most max bytes, or max <= 0), else read through and dropped,
// so a long record costs no more memory than max. ReadSlice reads in
// place; only a record longer than the buffer is copied together.
func next(br *bufio.Reader, max int64) (rec []byte, n int64, whole bool, err error) {
	b, err := br.ReadSlice('\n')
	n, whole = int64(len(b)), true
	if err == bufio.ErrBufferFull {
		rec = append([]byte(nil), b...)
		for err == bufio.ErrBufferFull {
			b, err = br.ReadSlice('\n')
			n += int64(len(b))
			if whole && max > 0 && n > max {
				whole, rec = false, nil
			}
			if whole {
				rec = append(rec, b...)
			}
		}
	} else {
		rec = b
	}
	if err != nil {
		return nil, 0, false, err
	}
	if max > 0 && n > max {
		whole, rec = false, nil
	}
	return rec, n, whole, nil
}
