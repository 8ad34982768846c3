package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gwEnv is an envelope the gateway wrote, as a client reads it.
type gwEnv struct {
	ChannelType   string `json:"channel_type"`
	SessionID     string `json:"session_id"`
	StreamID      string `json:"stream_id"`
	Seq           uint64 `json:"seq"`
	CorrelationID string `json:"correlation_id"`
	Target        string `json:"target"`
	EventType     string `json:"event_type"`
	StatusCode    string `json:"status_code"`
	ErrorCode     string `json:"error_code"`
	ReasonCode    string `json:"reason_code"`
	RemoteMode    string `json:"remote_mode"`
	ResumeCursor  string `json:"resume_cursor"`
	Payload       struct {
		Text    string `json:"text"`
		Delta   bool   `json:"delta"`
		Outcome string `json:"outcome"`
		AckSeq  uint64 `json:"ack_seq"`
		JobID   string `json:"job_id"`
		Rule    string `json:"rule"`
		Field   string `json:"field"`
		Code    string `json:"code"`
		HighSeq uint64 `json:"high_seq"`
		Resume  string `json:"resume_cursor"`
		// RemoteOutcome is the remote gateway's outcome of an envelope
		// an ssh route forwarded; Message says why a forward failed.
		RemoteOutcome string `json:"remote_outcome"`
		Message       string `json:"message"`
		MissingR      []struct {
			From uint64 `json:"from"`
			To   uint64 `json:"to"`
		} `json:"missing"`
	} `json:"payload"`
}

func parseGW(t *testing.T, out string) []gwEnv {
	t.Helper()
	var all []gwEnv
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var e gwEnv
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("gateway answer is not JSON: %v\n%s", err, l)
		}
		all = append(all, e)
	}
	return all
}

// send runs cbth gateway send with flags and returns its answers.
func (h *homeDir) gwSend(wantCode int, args ...string) []gwEnv {
	h.t.Helper()
	r := h.run(append([]string{"gateway", "send"}, args...)...)
	if r.code != wantCode {
		h.t.Fatalf("gateway send %v: exit %d, want %d\n%s%s", args, r.code, wantCode, r.stdout, r.stderr)
	}
	return parseGW(h.t, r.stdout)
}

func last(es []gwEnv) gwEnv { return es[len(es)-1] }

func (h *homeDir) recorded(stream string) []logged {
	h.t.Helper()
	var out []logged
	for _, e := range h.events("gateway.envelope_recorded") {
		if e.Stream.ID == stream {
			out = append(out, e)
		}
	}
	return out
}

// A dialog message routed by workspace_id + agent_id to a CortexFS
// socket session is answered on the same stream with increasing seqs;
// a resend after a reconnect is acknowledged as a duplicate and routed
// once; session_id does not pick the conversation; nothing the gateway
// wrote holds the payload.
func TestGatewayDialogToAgentSocket(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	servedModel(t, h)
	var rt struct {
		Outcome string `json:"outcome"`
	}
	h.ok(&rt, "gateway", "route", "add", "--workspace", "w1", "--agent", "a1", "--to", "ctx:model/local/chat", "--target", "ctx")
	if rt.Outcome != "added" {
		t.Fatalf("route add: %+v", rt)
	}
	secret := fmt.Sprintf("payload-%d-zebra", time.Now().UnixNano())
	msg := func(seq int, session, text string) []string {
		return []string{"--stream-id", "st-1", "--seq", fmt.Sprint(seq), "--session-id", session, "--workspace", "w1",
			"--agent", "a1", "--correlation-id", "conv-1", "--text", text}
	}
	got := h.gwSend(0, msg(1, "sess-a", secret)...)
	var text string
	var prev uint64
	for _, e := range got {
		if e.StreamID != "st-1" || e.CorrelationID != "conv-1" || e.Seq <= prev {
			t.Fatalf("answer off the stream or out of order: %+v", e)
		}
		prev = e.Seq
		if e.EventType == "message" && e.Payload.Delta {
			text += e.Payload.Text
		}
	}
	if text != secret {
		t.Fatalf("agent answered %q, want the echo of %q; answers %+v", text, secret, got)
	}
	if a := last(got); a.Target != "gateway" || a.StatusCode != "routed" || a.Payload.AckSeq != 1 || a.ResumeCursor != "1" {
		t.Fatalf("ack: %+v", a)
	}

	// A reconnect and a resend of seq 1: acknowledged, not routed again.
	again := h.gwSend(0, msg(1, "sess-b", secret)...)
	if len(again) != 1 || again[0].StatusCode != "duplicate" || again[0].Seq <= prev {
		t.Fatalf("resend: %+v", again)
	}
	if n := len(h.recorded("st-1")); n != 1 {
		t.Fatalf("%d envelopes recorded for one message sent twice", n)
	}

	// Another transport session, same routing key: the same agent
	// session answers (its history has both turns).
	h.gwSend(0, msg(2, "sess-c", "second turn")...)
	sessions, _ := filepath.Glob(filepath.Join(h.root, "ctx", "home", "*", "model", "local", "chat.d", "session", "gw-*"))
	if len(sessions) != 1 {
		t.Fatalf("agent sessions %v: session_id must not pick one", sessions)
	}

	// Every file of the home and every event of the log: the payload is
	// in none the gateway wrote. The agent's own session (its files under
	// ctx/home, and its ctxsession events, the session ABI's record of
	// the conversation) is the agent's, not the gateway's. The log file is
	// checked event by event, through export.
	agentFiles := filepath.Join(h.root, "ctx", "home")
	db := filepath.Join(h.root, "cbth.db")
	err := filepath.WalkDir(h.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == db || strings.HasPrefix(p, agentFiles+string(filepath.Separator)) || d.Type()&fs.ModeSocket != 0 {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("%s holds the payload", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(h.run("events", "export").stdout, "\n") {
		var e logged
		if strings.Contains(l, secret) && (json.Unmarshal([]byte(l), &e) != nil || e.Stream.Kind != "ctxsession") {
			t.Errorf("an event not of the agent's session holds the payload: %s", l)
		}
	}
	// The agent did get it (the grep would pass vacuously otherwise).
	if hits := grepDir(t, agentFiles, secret); hits == 0 {
		t.Fatal("the agent's session files do not hold the message: was it routed?")
	}

	// Traceable by correlation id; and the tail shows the metadata.
	r := h.run("events", "export", "--correlation-id", "conv-1")
	if r.code != 0 || strings.Count(r.stdout, "gateway.envelope_recorded") != 2 {
		t.Fatalf("export --correlation-id: exit %d\n%s", r.code, r.stdout)
	}
	r = h.run("gateway", "tail", "--from", "1", "--no-wait", "--json")
	if r.code != 0 || strings.Count(r.stdout, "gateway.envelope_recorded") != 2 || !strings.Contains(r.stdout, "gateway.route_added") {
		t.Fatalf("gateway tail: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func grepDir(t *testing.T, dir, s string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(s)) {
				n++
			}
		}
		return nil
	})
	return n
}

// A dialog message routed to a thread becomes a job through the delivery
// core, delivered by the debug target; export --correlation-id follows
// the conversation from the gateway into the core.
func TestGatewayMessageIntoThread(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.ok(nil, "gateway", "route", "add", "--workspace", "w2", "--agent", "coder", "--to", "thread:T-gw", "--target", "debug")
	secret := fmt.Sprintf("thread-payload-%d", time.Now().UnixNano())
	got := h.gwSend(0, "--stream-id", "st-2", "--seq", "1", "--session-id", "s", "--workspace", "w2", "--agent", "coder",
		"--correlation-id", "conv-2", "--text", secret)
	a := last(got)
	if a.StatusCode != "routed" || a.Payload.JobID == "" {
		t.Fatalf("ack: %+v", got)
	}
	h.ok(nil, "wait", "--job-id", a.Payload.JobID, "--timeout", "60s")
	r := h.run("events", "export", "--correlation-id", "conv-2")
	for _, typ := range []string{"gateway.envelope_recorded", "job.submitted", "job.completed", "batch.opened", "attempt.prepared", "batch.closed"} {
		if !strings.Contains(r.stdout, `"type":"`+typ+`"`) {
			t.Errorf("export --correlation-id lacks %s\n%s", typ, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "sweep:") && strings.Contains(r.stdout, `"job_ids":[]`) {
		t.Error("unrelated events exported")
	}
	// The gateway's own records hold no text; the core keeps the result
	// in its artifact store until delivered, as it keeps every result.
	if all := h.run("events", "export"); strings.Contains(all.stdout, secret) {
		t.Fatal("the log holds the payload")
	}
	// A resend is routed once: no second job.
	again := h.gwSend(0, "--stream-id", "st-2", "--seq", "1", "--session-id", "s2", "--workspace", "w2", "--agent", "coder",
		"--correlation-id", "conv-2", "--text", secret)
	if last(again).StatusCode != "duplicate" || len(h.events("job.submitted")) != 1 {
		t.Fatalf("resend: %+v", again)
	}
}

// Gaps are reported and filled, a dedup_key is routed once, resume says
// where the stream stands, and refusals of valid envelopes say why.
func TestGatewaySequenceGapsDedupResume(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	status := func(seq int, extra ...string) []gwEnv {
		return h.gwSend(0, append([]string{"--stream-id", "st-3", "--seq", fmt.Sprint(seq), "--session-id", "s", "--event-type", "status",
			"--correlation-id", "conv-3"}, extra...)...)
	}
	status(1)
	a := last(status(4))
	if a.StatusCode != "recorded" || a.ResumeCursor != "1" || len(a.Payload.MissingR) != 1 || a.Payload.MissingR[0].From != 2 || a.Payload.MissingR[0].To != 3 {
		t.Fatalf("gap not reported: %+v", a)
	}
	if gaps := h.events("gateway.gap_reported"); len(gaps) != 1 {
		t.Fatalf("gap events: %+v", gaps)
	}
	status(2)
	a = last(status(3))
	if a.ResumeCursor != "4" || len(a.Payload.MissingR) != 0 {
		t.Fatalf("gap not filled: %+v", a)
	}
	if d := last(status(3)); d.StatusCode != "duplicate" {
		t.Fatalf("resend: %+v", d)
	}
	status(5, "--dedup-key", "k-1")
	if d := last(status(6, "--dedup-key", "k-1")); d.StatusCode != "duplicate" {
		t.Fatalf("dedup_key resend: %+v", d)
	}
	r := last(status(99, "--status-code", "resume"))
	if r.StatusCode != "resumed" || r.Payload.Resume != "5" || r.Payload.HighSeq != 5 {
		t.Fatalf("resume: %+v", r)
	}
	// Valid but unroutable: refused with a code and reason, recorded,
	// seq left unused.
	nr := h.gwSend(1, "--stream-id", "st-3", "--seq", "6", "--session-id", "s", "--workspace", "nobody", "--agent", "x",
		"--correlation-id", "conv-3", "--text", "hi")
	if e := last(nr); e.EventType != "error" || e.ErrorCode != "ENOENT" || e.ReasonCode != "no_route" {
		t.Fatalf("no route: %+v", nr)
	}
	nk := h.gwSend(2, "--stream-id", "st-3", "--seq", "6", "--session-id", "s", "--correlation-id", "conv-3", "--text", "hi")
	if e := last(nk); e.ErrorCode != "EINVAL" || e.ReasonCode != "routing_key" {
		t.Fatalf("no routing key: %+v", nk)
	}
	// A destination that fails: recorded as failed, seq left unused so
	// the message can be sent again.
	h.ok(nil, "gateway", "route", "add", "--workspace", "w3", "--agent", "gone", "--to", "ctx:agent/gone", "--target", "ctx")
	fl := h.gwSend(69, "--stream-id", "st-3", "--seq", "6", "--session-id", "s", "--workspace", "w3", "--agent", "gone",
		"--correlation-id", "conv-3", "--text", "hi")
	if e := last(fl); e.ErrorCode != "EHOSTDOWN" || e.ReasonCode != "destination" || e.Payload.Outcome != "failed" {
		t.Fatalf("dead destination: %+v", fl)
	}
	if e := last(status(6)); e.StatusCode != "recorded" {
		t.Fatalf("seq 6 after refusals and a failure: %+v", e)
	}
}

// ssh_remote: status envelopes carry remote_mode; an ide_primary failure
// downgrades to terminal_fallback with a reason code, recorded.
func TestGatewaySSHRemoteDowngrade(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	ssh := func(code int, seq int, extra ...string) gwEnv {
		return last(h.gwSend(code, append([]string{"--channel", "ssh_remote", "--stream-id", "st-4", "--seq", fmt.Sprint(seq),
			"--session-id", "s", "--target", "vscode", "--correlation-id", "conv-4"}, extra...)...))
	}
	if a := ssh(0, 1, "--event-type", "status", "--payload", `{"remote_mode":"ide_primary"}`); a.RemoteMode != "ide_primary" {
		t.Fatalf("status: %+v", a)
	}
	// A client-stated downgrade without a reason is refused.
	if a := ssh(2, 2, "--event-type", "status", "--remote-mode", "terminal_fallback"); a.ReasonCode != "remote_mode" {
		t.Fatalf("reasonless downgrade: %+v", a)
	}
	a := ssh(0, 2, "--event-type", "error", "--remote-mode", "ide_primary", "--error-code", "ide_unreachable")
	if a.RemoteMode != "terminal_fallback" || a.ReasonCode != "ide_unreachable" {
		t.Fatalf("downgrade: %+v", a)
	}
	ch := h.events("gateway.mode_changed")
	if len(ch) != 2 || !strings.Contains(ch[1].line, `"reason_code":"ide_unreachable"`) {
		t.Fatalf("mode events: %+v", ch)
	}
	// Without remote_mode an ssh_remote envelope is malformed.
	if a := ssh(2, 3, "--event-type", "status"); a.ReasonCode != "required" {
		t.Fatalf("no remote_mode: %+v", a)
	}
}

// 100 malformed envelopes, each refused with its field, rule and code;
// the log does not move.
func TestGatewayRejectsMalformedEnvelopes(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	head := h.status().LogHeadSeq
	base := func() map[string]any {
		return map[string]any{"channel_type": "dialog", "session_id": "s", "stream_id": "st-5", "seq": 1, "timestamp": "2026-03-24T12:00:00Z",
			"correlation_id": "c", "target": "t", "event_type": "message", "payload": map[string]any{"text": "x"}}
	}
	type bad struct {
		line        string
		field, rule string
	}
	var cases []bad
	required := []string{"channel_type", "session_id", "stream_id", "seq", "timestamp", "correlation_id", "target", "event_type", "payload"}
	for i := 0; len(cases) < 100; i++ {
		m := base()
		f := required[i%len(required)]
		var c bad
		switch (i / len(required)) % 4 {
		case 0:
			delete(m, f)
			c.field, c.rule = f, "required"
		case 1:
			m[f] = nil
			c.field, c.rule = f, "required"
		case 2:
			m[f] = []int{i}
			c.field, c.rule = f, "type"
		case 3:
			switch f {
			case "channel_type", "event_type":
				m[f], c.field, c.rule = fmt.Sprintf("bogus-%d", i), f, "enum"
			case "seq":
				m[f], c.field, c.rule = -i, f, "range"
			case "timestamp":
				m[f], c.field, c.rule = fmt.Sprintf("day %d", i), f, "format"
			case "payload":
				m[f], c.field, c.rule = "text", f, "type"
			default:
				m[f], c.field, c.rule = "", f, "empty"
			}
		}
		b, _ := json.Marshal(m)
		c.line = string(b)
		cases = append(cases, c)
	}
	cases[97] = bad{line: `{not json`, rule: "json"}
	cases[98] = bad{line: `[1,2]`, rule: "json"}
	cases[99] = bad{line: `{"channel_type":"ssh_remote","session_id":"s","stream_id":"x","seq":1,"timestamp":"2026-03-24T12:00:00Z","correlation_id":"c","target":"t","event_type":"status","payload":{}}`, field: "remote_mode", rule: "required"}
	var in strings.Builder
	for _, c := range cases {
		in.WriteString(c.line + "\n")
	}
	cmd := h.cmd("gateway", "send")
	cmd.Stdin = strings.NewReader(in.String())
	out, err := cmd.Output()
	if err == nil {
		t.Fatal("send of malformed envelopes exited 0")
	}
	got := parseGW(t, string(out))
	if len(got) != len(cases) {
		t.Fatalf("%d answers for %d lines", len(got), len(cases))
	}
	for i, c := range cases {
		e := got[i]
		if e.EventType != "error" || e.ErrorCode != "EINVAL" || e.Payload.Rule != c.rule || e.Payload.Field != c.field || e.Target != "gateway" {
			t.Errorf("line %d %s: answer %+v, want field %q rule %q", i, c.line, e, c.field, c.rule)
		}
	}
	if now := h.status().LogHeadSeq; now != head {
		t.Fatalf("the log moved from %d to %d on malformed input", head, now)
	}
}

// A dialog message routed to a CortexFS agent (agent/<name>.sock) runs
// a turn of the agent's tool loop in the socket session of the routing
// key; its tool call and answer come back as dialog events on the stream.
func TestGatewayDialogToAgent(t *testing.T) {
	t.Parallel()
	a := newAgentHome(t)
	a.ok(nil, "gateway", "route", "add", "--workspace", "acme", "--agent", "coder", "--to", "ctx:agent/coder", "--target", "ctx")
	got := a.gwSend(0, "--stream-id", "st-6", "--seq", "1", "--session-id", "web-1", "--workspace", "acme", "--agent", "coder",
		"--correlation-id", "conv-6", "--text", `!tool fs.read {"path":"README.md"}`)
	var tool, answer bool
	var prev uint64
	for _, e := range got {
		if e.StreamID != "st-6" || e.Seq <= prev {
			t.Fatalf("off the stream or out of order: %+v", e)
		}
		prev = e.Seq
		tool = tool || e.EventType == "tool_call" && e.Target == "ctx:agent/coder"
		answer = answer || e.EventType == "message" && !e.Payload.Delta && strings.Contains(e.Payload.Text, "hello from the readme")
	}
	if !tool || !answer || last(got).StatusCode != "routed" {
		t.Fatalf("agent turn: tool_call %v, answer %v: %+v", tool, answer, got)
	}
	sessions, _ := filepath.Glob(filepath.Join(a.sessions(), "gw-*"))
	if len(sessions) != 1 {
		t.Fatalf("agent sessions %v", sessions)
	}
}

// A gateway client that sends but never reads cannot hold its
// connection for good: once a write has waited write_timeout, the
// gateway closes the connection and logs why (ETIMEDOUT).
func TestGatewayClosesAClientThatDoesNotRead(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	h.config("[gateway]\nwrite_timeout = \"300ms\"\n")
	h.ok(nil, "daemon", "status")
	c, err := net.Dial("unix", filepath.Join(h.root, "run", "gateway.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Each line is refused with an envelope; the answers fill the
	// socket's buffers since nothing reads them.
	go func() {
		line := []byte(`{"not":"an envelope"}` + "\n")
		for i := 0; i < 50000; i++ {
			if _, err := c.Write(line); err != nil {
				return
			}
		}
	}()
	log := filepath.Join(h.root, "log", "daemon.log")
	waitFor(t, "the gateway to give up on the client", 60*time.Second, func() bool {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "gateway client stopped reading") && strings.Contains(string(b), "ETIMEDOUT")
	})
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	// Closed with answers unread: EOF, or a reset.
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the connection was not closed: %v", err)
	}
}
