package fakeprovider

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// body is a Responses request the way Codex sends one: developer messages,
// the environment context, earlier turns, then the prompt.
func body(prompt string, extra ...string) string {
	items := []string{
		`{"type":"message","role":"developer","content":[{"type":"input_text","text":"system"}]}`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context/>"}]}`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"an earlier turn [old]"}]}`,
		`{"type":"message","role":"user","content":[{"type":"input_text","text":` + quote(prompt) + `}]}`,
	}
	return `{"model":"gpt-5.5","stream":true,"instructions":"","input":[` + strings.Join(append(items, extra...), ",") + `]}`
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

type event struct {
	Type  string          `json:"type"`
	Delta string          `json:"delta"`
	Text  string          `json:"text"`
	Item  json.RawMessage `json:"item"`
}

// post sends a request and returns the events in order, stopping after
// stop events when stop > 0.
func post(t *testing.T, ctx context.Context, s *Server, b string, stop int) []event {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.BaseURL()+"/responses", strings.NewReader(b))
	req.Header.Set("thread-id", "thread-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var evs []event
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e event
		if err := json.Unmarshal([]byte(data), &e); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		evs = append(evs, e)
		if stop > 0 && len(evs) == stop {
			break
		}
	}
	return evs
}

func types(evs []event) string {
	var s []string
	for _, e := range evs {
		s = append(s, strings.TrimPrefix(e.Type, "response."))
	}
	return strings.Join(s, " ")
}

func replyText(evs []event) (deltas int, joined, done string) {
	for _, e := range evs {
		switch e.Type {
		case "response.output_text.delta":
			deltas++
			joined += e.Delta
		case "response.output_text.done":
			done = e.Text
		}
	}
	return
}

// The full item sequence Codex needs, the echo of the prompt (not of an
// earlier turn), and the log and counts.
func TestCodexEcho(t *testing.T) {
	s := Start(Codex, "")
	defer s.Close()
	evs := post(t, context.Background(), s, body("hello [m1]"), 0)
	want := "created output_item.added content_part.added output_text.delta output_text.delta output_text.delta output_text.done content_part.done output_item.done completed"
	if got := types(evs); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	if n, joined, done := replyText(evs); n != 3 || joined != "ECHO: hello [m1]" || done != joined {
		t.Errorf("deltas %d %q done %q", n, joined, done)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].UserText != "hello [m1]" || reqs[0].ThreadID != "thread-1" || reqs[0].Title || reqs[0].ToolOutput {
		t.Errorf("log %+v", reqs)
	}
	if s.Count("[m1]") != 1 || s.Count("[old]") != 0 {
		t.Errorf("Count: [m1] %d, [old] %d; want 1 and 0 (only the latest prompt counts)", s.Count("[m1]"), s.Count("[old]"))
	}
	if s.BaseURL() != s.srv.URL+"/v1" {
		t.Errorf("BaseURL %s", s.BaseURL())
	}
}

// Title calls get the title whatever they contain, and are not counted.
func TestCodexTitle(t *testing.T) {
	s := Start(Codex, "")
	defer s.Close()
	b := body("Generate a concise, single-line task title for this conversation: do the thing [m2] " + MarkFail)
	if _, joined, _ := replyText(post(t, context.Background(), s, b, 0)); joined != TitleReply {
		t.Errorf("title reply %q", joined)
	}
	if reqs := s.Requests(); len(reqs) != 1 || !reqs[0].Title || s.Count("[m2]") != 0 {
		t.Errorf("title call logged as %+v, Count %d", reqs, s.Count("[m2]"))
	}
}

func TestCodexFailAndSlow(t *testing.T) {
	s := Start(Codex, "")
	defer s.Close()
	if got := types(post(t, context.Background(), s, body("x "+MarkFail), 0)); got != "created failed" {
		t.Errorf("fail: %s", got)
	}
	if n, joined, _ := replyText(post(t, context.Background(), s, body("y "+MarkSlow), 0)); n != SlowDeltas || !strings.HasPrefix(joined, "ECHO: y ") {
		t.Errorf("slow: %d deltas %q", n, joined)
	}
}

// A tool call asks for escalation; the follow-up carrying the output is
// answered with it and logged as a tool continuation.
func TestCodexTool(t *testing.T) {
	s := Start(Codex, "")
	defer s.Close()
	evs := post(t, context.Background(), s, body("do it "+MarkTool+" echo hi\nthanks"), 0)
	if got := types(evs); got != "created output_item.added output_item.done completed" {
		t.Fatalf("tool call events: %s", got)
	}
	var item struct{ Type, Name, Arguments string }
	_ = json.Unmarshal(evs[2].Item, &item)
	var args map[string]string
	_ = json.Unmarshal([]byte(item.Arguments), &args)
	if item.Type != "function_call" || item.Name != "exec_command" || args["cmd"] != "echo hi" || args["sandbox_permissions"] != "require_escalated" {
		t.Errorf("tool call %+v %v", item, args)
	}
	follow := body("do it "+MarkTool+" echo hi\nthanks", `{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{}"}`,
		`{"type":"function_call_output","call_id":"call_1","output":"hi\n"}`)
	if _, joined, _ := replyText(post(t, context.Background(), s, follow, 0)); joined != "TOOL OUTPUT: hi\n" {
		t.Errorf("follow-up reply %q", joined)
	}
	if reqs := s.Requests(); len(reqs) != 2 || reqs[0].ToolOutput || !reqs[1].ToolOutput {
		t.Errorf("log %+v", reqs)
	}
}

// A hang holds after the first delta until Release, then completes; one
// whose client goes away ends.
func TestCodexHang(t *testing.T) {
	s := Start(Codex, "")
	defer s.Close()
	done := make(chan []event)
	go func() { done <- post(t, context.Background(), s, body("wait "+MarkHang), 0) }()
	for len(s.Requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	select {
	case evs := <-done:
		t.Fatalf("hang finished before Release: %s", types(evs))
	case <-time.After(50 * time.Millisecond):
	}
	s.Release()
	if evs := <-done; !strings.HasSuffix(types(evs), "output_item.done completed") {
		t.Errorf("after Release: %s", types(evs))
	}

	ctx, cancel := context.WithCancel(context.Background())
	evs := post(t, ctx, s, body("wait again "+MarkHang), 4) // up to the first delta
	cancel()
	if types(evs) != "created output_item.added content_part.added output_text.delta" {
		t.Errorf("hang: %s", types(evs))
	}
}
