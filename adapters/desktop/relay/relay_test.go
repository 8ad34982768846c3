package relay

import (
	"encoding/json"
	"strings"
	"testing"
)

func rec(typ, ptype, output string) []byte {
	b, _ := json.Marshal(map[string]any{"type": typ, "payload": map[string]any{"type": ptype, "output": output}})
	return b
}

// Only a function_call_output's whole prefixed lines count; an envelope
// carrying a lease, or malformed, is diagnostic; the hash is the same for
// the same envelope printed again.
func TestEnvelopes(t *testing.T) {
	e := Envelope{Marker: "m1-x", Kind: KindArmPending, SourceThreadID: "S", AttemptID: "a", Generation: 2, BridgeRequestID: "r"}
	line := Line(e)
	withLease := strings.Replace(line, `"marker"`, `"bridge_arm_lease_id":"L","marker"`, 1)
	cases := []struct {
		name string
		rec  []byte
		want int
	}{
		{"tool output", rec("response_item", "function_call_output", "noise\n"+line+"\nmore"), 1},
		{"user message", rec("response_item", "message", line), 0},
		{"agent event", rec("event_msg", "agent_message", line), 0},
		{"lease carried", rec("response_item", "function_call_output", withLease), 0},
		{"malformed", rec("response_item", "function_call_output", Prefix+"{not json"), 0},
		{"inside a line", rec("response_item", "function_call_output", "say "+line), 0},
	}
	for _, c := range cases {
		got := Envelopes(c.rec)
		if len(got) != c.want {
			t.Fatalf("%s: %d envelopes, want %d", c.name, len(got), c.want)
		}
		if c.want == 1 && got[0].Envelope != e {
			t.Fatalf("%s: %+v", c.name, got[0].Envelope)
		}
	}
	a, b := Envelopes(cases[0].rec), Envelopes(rec("response_item", "function_call_output", line))
	if a[0].SHA256 != b[0].SHA256 {
		t.Fatal("the same envelope hashes differently")
	}
}

// Read stops before an incomplete last line and resumes there.
func TestReadWaitsForCompleteLines(t *testing.T) {
	e := Envelope{Marker: "m1-x", Kind: KindArmAccepted, SourceThreadID: "S", AttemptID: "a", Generation: 1, BridgeRequestID: "r"}
	full := string(rec("response_item", "function_call_output", Line(e))) + "\n"
	data := full + full[:10]
	found, off, line, err := Read(strings.NewReader(data), 0, 0, int64(len(data)), Limits{Records: 256, Bytes: 1 << 20})
	if err != nil || len(found) != 1 || off != int64(len(full)) || line != 1 || found[0].Line != 1 {
		t.Fatalf("read: %v %d %d %d", err, len(found), off, line)
	}
}
