package envelope

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/internal/errs"
)

// valid is a dialog message with every required field.
func valid() map[string]any {
	return map[string]any{
		"channel_type": "dialog", "session_id": "sess-001", "stream_id": "stream-001", "seq": 12,
		"timestamp": "2026-03-24T12:00:00Z", "correlation_id": "corr-001", "target": "wechat",
		"event_type": "message", "payload": map[string]any{"text": "hello"},
	}
}

func line(t testing.TB, m map[string]any) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The contract's two examples decode; unknown fields are ignored.
func TestDecodeAcceptsTheContractExamples(t *testing.T) {
	m := valid()
	m["x_unknown"] = map[string]any{"deep": 1}
	e, err := Decode(line(t, m))
	if err != nil {
		t.Fatal(err)
	}
	if e.ChannelType != "dialog" || e.Seq != 12 || e.EventType != "message" || string(e.Payload) != `{"text":"hello"}` {
		t.Fatalf("decoded %+v", e)
	}
	ssh := `{"channel_type":"ssh_remote","session_id":"sess-002","stream_id":"stream-009","seq":3,"timestamp":"2026-03-24T12:05:00Z","correlation_id":"corr-002","target":"vscode","event_type":"status","payload":{"remote_mode":"ide_primary"}}`
	e, err = Decode([]byte(ssh))
	if err != nil || e.RemoteMode != ModeIDEPrimary {
		t.Fatalf("ssh_remote example: %+v %v", e, err)
	}
}

// Every rule the contract makes, and the decoder's own strictness: each
// case names the field and rule its rejection must carry.
func TestDecodeRejectsWithFieldAndRule(t *testing.T) {
	set := func(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }
	del := func(k string) func(map[string]any) { return func(m map[string]any) { delete(m, k) } }
	cases := []struct {
		name  string
		edit  func(map[string]any)
		field string
		rule  string
	}{
		{"bad channel", set("channel_type", "email"), "channel_type", RuleEnum},
		{"upper channel", set("channel_type", "DIALOG"), "channel_type", RuleEnum},
		{"bad event", set("event_type", "typing"), "event_type", RuleEnum},
		{"seq zero", set("seq", 0), "seq", RuleRange},
		{"seq negative", set("seq", -1), "seq", RuleRange},
		{"seq float", set("seq", 1.5), "seq", RuleType},
		{"seq string", set("seq", "1"), "seq", RuleType},
		{"seq huge", set("seq", 1<<60), "seq", RuleRange},
		{"timestamp format", set("timestamp", "yesterday"), "timestamp", RuleFormat},
		{"timestamp type", set("timestamp", 17), "timestamp", RuleType},
		{"payload string", set("payload", "hello"), "payload", RuleType},
		{"payload array", set("payload", []any{1}), "payload", RuleType},
		{"session empty", set("session_id", ""), "session_id", RuleEmpty},
		{"stream type", set("stream_id", 5), "stream_id", RuleType},
		{"target long", set("target", strings.Repeat("t", MaxID+1)), "target", RuleLength},
		{"retry negative", set("retry_count", -2), "retry_count", RuleRange},
		{"dedup type", set("dedup_key", true), "dedup_key", RuleType},
		{"dialog with mode", set("remote_mode", "ide_primary"), "remote_mode", RuleNotAllowed},
		{"ssh without mode", set("channel_type", "ssh_remote"), "remote_mode", RuleRequired},
		{"ssh bad mode", func(m map[string]any) { m["channel_type"] = "ssh_remote"; m["remote_mode"] = "gui" }, "remote_mode", RuleEnum},
		{"ssh conflicting modes", func(m map[string]any) {
			m["channel_type"], m["remote_mode"] = "ssh_remote", "ide_primary"
			m["payload"] = map[string]any{"remote_mode": "terminal_fallback"}
		}, "remote_mode", RuleConflict},
		{"ssh payload mode type", func(m map[string]any) {
			m["channel_type"], m["payload"] = "ssh_remote", map[string]any{"remote_mode": 1}
		}, "payload.remote_mode", RuleType},
	}
	for _, f := range []string{"channel_type", "session_id", "stream_id", "seq", "timestamp", "correlation_id", "target", "event_type", "payload"} {
		cases = append(cases, struct {
			name  string
			edit  func(map[string]any)
			field string
			rule  string
		}{"missing " + f, del(f), f, RuleRequired}, struct {
			name  string
			edit  func(map[string]any)
			field string
			rule  string
		}{"null " + f, set(f, nil), f, RuleRequired})
	}
	for _, c := range cases {
		m := valid()
		c.edit(m)
		_, err := Decode(line(t, m))
		var r *Rejection
		if !errors.As(err, &r) || r.Field != c.field || r.Rule != c.rule || errs.CodeOf(err) != errs.EINVAL {
			t.Errorf("%s: got %#v, want field %s rule %s", c.name, err, c.field, c.rule)
		}
	}
	for _, raw := range []string{``, `[]`, `null`, `"x"`, `{`, `{"seq":1}x`} {
		_, err := Decode([]byte(raw))
		var r *Rejection
		if !errors.As(err, &r) || r.Rule != RuleJSON && r.Rule != RuleRequired {
			t.Errorf("%q: got %v", raw, err)
		}
	}
	if _, err := Decode([]byte("{\"channel_type\":\"dia\xfflog\"}")); !isRule(err, RuleUTF8) {
		t.Errorf("bad UTF-8: %v", err)
	}
	big := valid()
	big["payload"] = map[string]any{"text": strings.Repeat("x", MaxFrame)}
	if _, err := Decode(line(t, big)); !isRule(err, RuleFrameSize) || errs.CodeOf(err) != errs.EMSGSIZE {
		t.Errorf("oversized: %v", err)
	}
}

func isRule(err error, rule string) bool {
	var r *Rejection
	return errors.As(err, &r) && r.Rule == rule
}

// What Encode writes, Decode reads back to the same envelope.
func TestEncodeRoundTrip(t *testing.T) {
	m := valid()
	m["workspace_id"], m["agent_id"], m["dedup_key"], m["retry_count"] = "w", "a", "k", 2
	e, err := Decode(line(t, m))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Encode(e)
	if err != nil || b[len(b)-1] != '\n' {
		t.Fatalf("%q %v", b, err)
	}
	back, err := Decode(b[:len(b)-1])
	if err != nil || !reflect.DeepEqual(back, e) {
		t.Fatalf("round trip: %+v %v, want %+v", back, err, e)
	}
}

var rules = map[string]bool{RuleFrameSize: true, RuleUTF8: true, RuleJSON: true, RuleRequired: true, RuleType: true, RuleEmpty: true,
	RuleLength: true, RuleEnum: true, RuleRange: true, RuleFormat: true, RuleConflict: true, RuleNotAllowed: true}

// FuzzDecode: the decoder never panics, every refusal carries a known
// rule and code, and whatever it accepts satisfies the contract and
// survives a round trip through Encode.
func FuzzDecode(f *testing.F) {
	f.Add(line(f, valid()))
	f.Add([]byte(`{"channel_type":"ssh_remote","session_id":"s","stream_id":"x","seq":3,"timestamp":"2026-03-24T12:05:00Z","correlation_id":"c","target":"vscode","event_type":"status","payload":{"remote_mode":"ide_primary"}}`))
	f.Add([]byte(`{"seq":1e3}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			var r *Rejection
			if !errors.As(err, &r) || !rules[r.Rule] || (r.Code != errs.EINVAL && r.Code != errs.EMSGSIZE) {
				t.Fatalf("rejection without a known rule: %#v", err)
			}
			return
		}
		if e.ChannelType != ChannelDialog && e.ChannelType != ChannelSSHRemote || e.Seq < 1 || e.SessionID == "" ||
			e.StreamID == "" || e.CorrelationID == "" || e.Target == "" || len(e.Payload) == 0 || e.Payload[0] != '{' {
			t.Fatalf("accepted %+v", e)
		}
		if (e.ChannelType == ChannelSSHRemote) != (e.RemoteMode != "") {
			t.Fatalf("remote mode %q on %s", e.RemoteMode, e.ChannelType)
		}
		out, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Decode(out[:len(out)-1])
		if err != nil {
			t.Fatalf("re-decode %s: %v", out, err)
		}
		back.Payload, e.Payload = nil, nil
		if !back.Timestamp.Equal(e.Timestamp) {
			t.Fatalf("timestamp %v != %v", back.Timestamp, e.Timestamp)
		}
		back.Timestamp = e.Timestamp
		if !reflect.DeepEqual(back, e) {
			t.Fatalf("round trip %+v != %+v", back, e)
		}
	})
}
