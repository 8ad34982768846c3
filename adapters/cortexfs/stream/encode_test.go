package stream

import (
	"encoding/json"
	"math/rand"
	"strings"
	"testing"
)

func marshalLine(t *testing.T, e Event) string {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// TestEncodeMatchesMarshal: the hand-written encoder gives exactly the
// bytes of json.Marshal, for every byte value and assorted runes.
func TestEncodeMatchesMarshal(t *testing.T) {
	var tricky []string
	for c := 0; c < 256; c++ {
		tricky = append(tricky, "a"+string([]byte{byte(c)})+"z")
	}
	tricky = append(tricky, "", "héllo wörld", "日本語", "emoji 😀", "\u2028\u2029", "<b>&amp;</b>", `"quoted" \back\`,
		"\xff\xfe", "ok\xe2\x82", "tab\tnl\ncr\r", "\x7f", "\ufffd", "\U0010FFFF")
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 2000; i++ {
		n := r.Intn(12)
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(r.Intn(256))
		}
		tricky = append(tricky, string(b))
	}
	in, out := int64(0), int64(1234567890123)
	for _, s := range tricky {
		evs := []Event{
			{Type: TypeDelta, Run: "r1", Text: s},
			{Type: TypeMessage, ID: "e1", Run: s, Role: "assistant", Content: []Part{{Type: "text", Text: s}, {Type: s, Text: ""}}},
			{Type: TypeError, Run: "r", Code: "EACCES", Message: s, Model: s},
			{Type: s, CallID: s, Name: s, Status: s, InputTokens: &in, OutputTokens: &out},
			{Type: TypeDone},
		}
		for _, e := range evs {
			got, err := Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			if want := marshalLine(t, e); string(got) != want {
				t.Fatalf("%q:\n got %s\nwant %s", s, got, want)
			}
		}
	}
	// Tool calls go through json.Marshal (raw arguments compacted).
	tc := ToolCall("c1", "f", `{ "a" : "<x>" }`)
	got, _ := Encode(tc)
	if want := marshalLine(t, tc); string(got) != want || !strings.Contains(want, `"arguments":{"a":"\u003cx\u003e"}`) {
		t.Fatalf("tool call: %s vs %s", got, want)
	}
}
