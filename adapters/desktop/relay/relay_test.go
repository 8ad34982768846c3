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
	r, err := Read(strings.NewReader(data), 0, 0, int64(len(data)), Limits{Records: 256, Bytes: 1 << 20})
	if err != nil || len(r.Found) != 1 || r.Offset != int64(len(full)) || r.Line != 1 || r.Found[0].Line != 1 {
		t.Fatalf("read: %v %+v", err, r)
	}
}

// A record longer than the round's byte budget is read whole, up to
// Limits.Record; a longer one is read through and skipped, and the read
// moves past it either way, to the envelope after it.
func TestReadMovesPastLongRecords(t *testing.T) {
	e := Envelope{Marker: "m1-x", Kind: KindArmAccepted, SourceThreadID: "S", AttemptID: "a", Generation: 1, BridgeRequestID: "r"}
	long := string(rec("response_item", "function_call_output", strings.Repeat("x", 3<<20)+"\n"+Line(e))) + "\n"
	huge := string(rec("response_item", "function_call_output", Line(e)+"\n"+strings.Repeat("y", 5<<20))) + "\n"
	after := string(rec("response_item", "function_call_output", Line(e))) + "\n"
	data := long + huge + after
	lim := Limits{Records: 256, Bytes: 1 << 20, Record: 4 << 20}
	r, err := Read(strings.NewReader(data), 0, 0, int64(len(data)), lim)
	if err != nil || len(r.Found) != 1 || r.Found[0].Line != 1 || r.Offset != int64(len(long)) || r.Line != 1 || len(r.Skipped) != 0 {
		t.Fatalf("a 3 MiB record within a 1 MiB round: %v %+v", err, r)
	}
	r, err = Read(strings.NewReader(data[r.Offset:]), r.Offset, r.Line, int64(len(data)), lim)
	if err != nil || len(r.Found) != 0 || r.Offset != int64(len(long+huge)) || r.Line != 2 ||
		len(r.Skipped) != 1 || r.Skipped[0] != (Skipped{Line: 2, Bytes: int64(len(huge))}) {
		t.Fatalf("a 5 MiB record over the 4 MiB limit: %v %+v", err, r)
	}
	r, err = Read(strings.NewReader(data[r.Offset:]), r.Offset, r.Line, int64(len(data)), lim)
	if err != nil || len(r.Found) != 1 || r.Found[0].Line != 3 || r.Offset != int64(len(data)) {
		t.Fatalf("the record after: %v %+v", err, r)
	}
	// Still being written: neither read nor skipped yet.
	part := huge[:len(huge)-1]
	r, err = Read(strings.NewReader(part), 0, 0, int64(len(part)), lim)
	if err != nil || r.Offset != 0 || len(r.Skipped) != 0 {
		t.Fatalf("an incomplete long record: %v %+v", err, r)
	}
}
