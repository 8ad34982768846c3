package openai_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/openai"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

const secret = "sk-TEST-a1b2c3d4e5f6"

type key string

func (k key) APIKey(context.Context, string, string) (string, error) { return string(k), nil }

// sse writes events as a server-sent event stream, ended as OpenAI ends it.
func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("data: " + e + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

func run(t *testing.T, d driver.Driver, base string, req driver.Request) ([]stream.Event, error) {
	t.Helper()
	req.Provider, req.Model, req.NativeID = "openai", "openai/m", "m"
	req.Defaults = append(req.Defaults, object.KV{Key: "base_url", Value: base})
	var evs []stream.Event
	err := d.Stream(context.Background(), req, stream.SinkFunc(func(e stream.Event) error { evs = append(evs, e); return nil }))
	return evs, err
}

func types(evs []stream.Event) string {
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Type))
	}
	return strings.Join(out, " ")
}

// The chat request carries every role as chat completions spells it
// (an assistant's tool calls, a tool's result by call id, empty
// arguments as {}), the tools by their wire names, the generation
// defaults, usage asked for, the key as a bearer token.
func TestChatRequest(t *testing.T) {
	s := fakeprovider.StartCanned(t, 200, sse(`{"choices":[{"index":0,"delta":{"content":"ok"}}]}`))
	chat := openai.Drivers(sdkdeps.Deps{Creds: key(secret)})[openai.ChatName]
	_, err := run(t, chat, s.URL, driver.Request{
		Messages: []driver.Message{
			{Role: driver.RoleSystem, Content: "be brief"},
			{Role: driver.RoleUser, Content: "read a"},
			{Role: driver.RoleAssistant, ToolCalls: []driver.ToolCall{{ID: "c1", Name: "fs.read", Arguments: json.RawMessage(`{"path":"a"}`)}, {ID: "c2", Name: "fs.list"}}},
			{Role: driver.RoleTool, CallID: "c1", Name: "fs.read", Content: "A"},
			{Role: driver.RoleUser, Content: "and?"},
		},
		Tools:    []driver.ToolDef{{Name: "fs.read", Description: "read a file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)}, {Name: "fs.list"}},
		Defaults: []object.KV{{Key: "temperature", Value: "0.25"}, {Key: "top_p", Value: "0.5"}, {Key: "max_tokens", Value: "64"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "Bearer "+secret {
		t.Fatalf("%d requests, auth %q", len(reqs), reqs[0].Header.Get("Authorization"))
	}
	b := reqs[0].Body
	msgs, _ := b["messages"].([]any)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if strings.Join(roles, " ") != "system user assistant tool user" {
		t.Fatalf("roles %v", roles)
	}
	calls := msgs[2].(map[string]any)["tool_calls"].([]any)
	fn0 := calls[0].(map[string]any)["function"].(map[string]any)
	fn1 := calls[1].(map[string]any)["function"].(map[string]any)
	if fn0["name"] != "fs_read" || fn0["arguments"] != `{"path":"a"}` || fn1["arguments"] != "{}" {
		t.Errorf("the assistant's calls %v", calls)
	}
	if tm := msgs[3].(map[string]any); tm["tool_call_id"] != "c1" || tm["content"] != "A" {
		t.Errorf("the tool's result %v", tm)
	}
	tools := b["tools"].([]any)
	f := tools[0].(map[string]any)["function"].(map[string]any)
	if f["name"] != "fs_read" || f["description"] != "read a file" || tools[1].(map[string]any)["function"].(map[string]any)["parameters"] == nil {
		t.Errorf("tools %v", tools)
	}
	if b["model"] != "m" || b["temperature"] != 0.25 || b["top_p"] != 0.5 || b["max_completion_tokens"] != 64.0 || b["stream"] != true {
		t.Errorf("the request's model and defaults: %v", b)
	}
	if so, _ := b["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("usage not asked for: %v", b["stream_options"])
	}
}

// The chat stream: reasoning and text as deltas while they come, a tool
// call's pieces joined and emitted after the reasoning, in index order
// whatever order they came in, under their canonical names; the usage
// last.
func TestChatStream(t *testing.T) {
	s := fakeprovider.StartCanned(t, 200, sse(
		`{"choices":[{"index":0,"delta":{"reasoning_content":"think "}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"Hel"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":"lo","tool_calls":[{"index":1,"id":"c2","function":{"name":"fs_list","arguments":""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"fs_read","arguments":"{\"pa"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"a\"}"}}]}}]}`,
		`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`))
	chat := openai.Drivers(sdkdeps.Deps{Creds: key(secret)})[openai.ChatName]
	evs, err := run(t, chat, s.URL, driver.Request{Messages: []driver.Message{{Role: driver.RoleUser, Content: "hi"}},
		Tools: []driver.ToolDef{{Name: "fs.read"}, {Name: "fs.list"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := types(evs); got != "reasoning_delta delta delta reasoning_message tool_call tool_call message usage" {
		t.Fatalf("events %s", got)
	}
	b, _ := json.Marshal(evs)
	for _, want := range []string{`"name":"fs.read"`, `"name":"fs.list"`, `"arguments":{"path":"a"}`, `"input_tokens":7`, `"output_tokens":3`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the events lack %s: %s", want, b)
		}
	}
	if i, j := strings.Index(string(b), `"fs.read"`), strings.Index(string(b), `"fs.list"`); i < 0 || i > j {
		t.Errorf("calls out of index order: %s", b)
	}
}

// A provider's refusal reaches the caller as its stable code at once (no
// retry: a 429 is EAGAIN now), and never with the key in it; an error
// inside the stream is coded by its type; an unreachable host is
// EHOSTDOWN; a bad default is EINVAL before any request.
func TestErrors(t *testing.T) {
	chat := openai.Drivers(sdkdeps.Deps{Creds: key(secret)})[openai.ChatName]
	msgs := []driver.Message{{Role: driver.RoleUser, Content: "hi"}}
	for _, c := range []struct {
		name     string
		status   int
		response string
		code     errs.Code
	}{
		{"bad key", 401, `{"error":{"message":"Incorrect API key provided: ` + secret + `","type":"invalid_request_error"}}`, errs.EACCES},
		{"rate limited", 429, `{"error":{"message":"slow down","type":"rate_limit_exceeded"}}`, errs.EAGAIN},
		{"no such model", 404, `{"error":{"message":"no model m"}}`, errs.ENOENT},
		{"down", 503, `{"error":{"message":"overloaded"}}`, errs.EHOSTDOWN},
		{"an error in the stream", 200, sse(`{"error":{"message":"quota gone for ` + secret + `","type":"insufficient_quota"}}`), errs.EAGAIN},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fakeprovider.StartCanned(t, c.status, c.response)
			_, err := run(t, chat, s.URL, driver.Request{Messages: msgs})
			if errs.CodeOf(err) != c.code || strings.Contains(err.Error(), secret) {
				t.Fatalf("%v, want %s without the key", err, c.code)
			}
			if n := len(s.Requests()); n != 1 {
				t.Fatalf("%d requests: a refusal was retried", n)
			}
		})
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if _, err := run(t, chat, dead.URL, driver.Request{Messages: msgs}); errs.CodeOf(err) != errs.EHOSTDOWN {
		t.Errorf("an unreachable host: %v", err)
	}
	if _, err := run(t, chat, "http://127.0.0.1:9", driver.Request{Messages: msgs, Defaults: []object.KV{{Key: "max_tokens", Value: "-1"}}}); errs.CodeOf(err) != errs.EINVAL {
		t.Errorf("a bad default: %v", err)
	}
	if _, err := run(t, chat, "http://127.0.0.1:9", driver.Request{Messages: []driver.Message{{Role: driver.RoleSystem, Content: "x"}}}); errs.CodeOf(err) != errs.EINVAL {
		t.Errorf("no user message: %v", err)
	}
	other := driver.Request{Provider: "acme", Model: "acme/m", NativeID: "m", Messages: msgs}
	if err := chat.Stream(context.Background(), other, stream.SinkFunc(func(stream.Event) error { return nil })); errs.CodeOf(err) != errs.ENOTCONF {
		t.Errorf("a compatible host without base_url: %v", err)
	}
}

// The Responses driver: the request names the model and the input, the
// text streams as deltas and ends in a message.
func TestResponses(t *testing.T) {
	s := fakeprovider.StartCanned(t, 200, sse(
		`{"type":"response.output_text.delta","item_id":"i1","output_index":0,"content_index":0,"delta":"Hi","sequence_number":1}`,
		`{"type":"response.output_text.delta","item_id":"i1","output_index":0,"content_index":0,"delta":" there","sequence_number":2}`,
		`{"type":"response.completed","sequence_number":3,"response":{"id":"r1","object":"response","created_at":1,"status":"completed","model":"m","output":[{"type":"message","id":"i1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Hi there","annotations":[]}]}],"usage":{"input_tokens":4,"output_tokens":2,"total_tokens":6,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}}}`))
	resp := openai.Drivers(sdkdeps.Deps{Creds: key(secret)})[openai.ResponsesName]
	evs, err := run(t, resp, s.URL, driver.Request{Messages: []driver.Message{{Role: driver.RoleSystem, Content: "be brief"}, {Role: driver.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := types(evs); !strings.HasPrefix(got, "delta delta message") {
		t.Fatalf("events %s", got)
	}
	b, _ := json.Marshal(evs)
	if !strings.Contains(string(b), "Hi there") {
		t.Errorf("the message: %s", b)
	}
	if reqs := s.Requests(); len(reqs) != 1 || reqs[0].Body["model"] != "m" || reqs[0].Body["input"] == nil || reqs[0].Header.Get("Authorization") != "Bearer "+secret {
		t.Errorf("the requests %+v", reqs)
	}
}
