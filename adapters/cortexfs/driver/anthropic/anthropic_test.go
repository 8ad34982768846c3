package anthropic_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/anthropic"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

const secret = "sk-ant-TEST-0a9b8c7d"

type key string

func (k key) APIKey(context.Context, string, string) (string, error) { return string(k), nil }

// sse writes named server-sent events: name, data, name, data, ...
func sse(pairs ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		b.WriteString("event: " + pairs[i] + "\ndata: " + pairs[i+1] + "\n\n")
	}
	return b.String()
}

var short = sse(
	"message_start", `{"type":"message_start","message":{"id":"m1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":9,"output_tokens":1}}}`,
	"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}`,
	"content_block_stop", `{"type":"content_block_stop","index":0}`,
	"message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`,
	"message_stop", `{"type":"message_stop"}`)

func run(t *testing.T, base string, req driver.Request) ([]stream.Event, error) {
	t.Helper()
	req.Provider, req.Model, req.NativeID = "anthropic", "anthropic/m", "m"
	req.Defaults = append(req.Defaults, object.KV{Key: "base_url", Value: base})
	d := anthropic.Drivers(sdkdeps.Deps{Creds: key(secret)})[anthropic.Name]
	var evs []stream.Event
	err := d.Stream(context.Background(), req, stream.SinkFunc(func(e stream.Event) error { evs = append(evs, e); return nil }))
	return evs, err
}

// The request as the Messages API wants it: system prompts apart, an
// assistant's tool calls as tool_use blocks with object arguments, the
// results of one turn's calls together in one user message, tools with
// their schema's required list, max_tokens always (4096 unless a default
// says), the key in x-api-key.
func TestRequest(t *testing.T) {
	s := fakeprovider.StartCanned(t, 200, short)
	_, err := run(t, s.URL, driver.Request{
		Messages: []driver.Message{
			{Role: driver.RoleSystem, Content: "be brief"},
			{Role: driver.RoleUser, Content: "read a and b"},
			{Role: driver.RoleAssistant, ToolCalls: []driver.ToolCall{{ID: "t1", Name: "fs.read", Arguments: json.RawMessage(`{"path":"a"}`)}, {ID: "t2", Name: "fs.read"}}},
			{Role: driver.RoleTool, CallID: "t1", Content: "A"},
			{Role: driver.RoleTool, CallID: "t2", Content: "B"},
			{Role: driver.RoleUser, Content: "so?"},
		},
		Tools: []driver.ToolDef{{Name: "fs.read", Description: "read", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	req := s.Requests()[0]
	b := req.Body
	if req.Header.Get("X-Api-Key") != secret || b["model"] != "m" || b["max_tokens"] != 4096.0 {
		t.Fatalf("key %q, body %v", req.Header.Get("X-Api-Key"), b)
	}
	if sys, _ := b["system"].([]any); len(sys) != 1 || sys[0].(map[string]any)["text"] != "be brief" {
		t.Errorf("system %v", b["system"])
	}
	msgs := b["messages"].([]any)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	if strings.Join(roles, " ") != "user assistant user user" {
		t.Fatalf("roles %v", roles)
	}
	uses := msgs[1].(map[string]any)["content"].([]any)
	if len(uses) != 2 || uses[0].(map[string]any)["type"] != "tool_use" || uses[0].(map[string]any)["name"] != "fs_read" ||
		uses[0].(map[string]any)["input"].(map[string]any)["path"] != "a" || len(uses[1].(map[string]any)["input"].(map[string]any)) != 0 {
		t.Errorf("the assistant's calls %v", uses)
	}
	results := msgs[2].(map[string]any)["content"].([]any)
	if len(results) != 2 || results[0].(map[string]any)["tool_use_id"] != "t1" || results[1].(map[string]any)["tool_use_id"] != "t2" {
		t.Errorf("one turn's results %v", results)
	}
	tool := b["tools"].([]any)[0].(map[string]any)
	if tool["name"] != "fs_read" || tool["input_schema"].(map[string]any)["required"].([]any)[0] != "path" {
		t.Errorf("tool %v", tool)
	}

	s = fakeprovider.StartCanned(t, 200, short)
	if _, err := run(t, s.URL, driver.Request{Messages: []driver.Message{{Role: driver.RoleUser, Content: "hi"}},
		Defaults: []object.KV{{Key: "max_tokens", Value: "100"}, {Key: "temperature", Value: "0.5"}}}); err != nil {
		t.Fatal(err)
	}
	if b := s.Requests()[0].Body; b["max_tokens"] != 100.0 || b["temperature"] != 0.5 {
		t.Errorf("defaults: %v", b)
	}
}

// The stream: thinking and text as deltas, a tool call as soon as its
// block ends (its arguments joined, its name canonical), the usage of
// the start and the last delta; the ending holds no second copy of the
// calls.
func TestStream(t *testing.T) {
	srv := fakeprovider.StartCanned(t, 200, sse(
		"message_start", `{"type":"message_start","message":{"id":"m1","type":"message","role":"assistant","model":"m","content":[],"usage":{"input_tokens":11,"output_tokens":1}}}`,
		"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
		"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}`,
		"content_block_stop", `{"type":"content_block_stop","index":0}`,
		"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
		"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Look"}}`,
		"content_block_stop", `{"type":"content_block_stop","index":1}`,
		"content_block_start", `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t1","name":"fs_read","input":{}}}`,
		"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"path\":"}}`,
		"content_block_delta", `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"a\"}"}}`,
		"content_block_stop", `{"type":"content_block_stop","index":2}`,
		"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}`,
		"message_stop", `{"type":"message_stop"}`))
	evs, err := run(t, srv.URL, driver.Request{Messages: []driver.Message{{Role: driver.RoleUser, Content: "hi"}}, Tools: []driver.ToolDef{{Name: "fs.read"}}})
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, string(e.Type))
	}
	if got := strings.Join(types, " "); got != "reasoning_delta delta tool_call reasoning_message message usage" {
		t.Fatalf("events %s", got)
	}
	b, _ := json.Marshal(evs)
	for _, want := range []string{`"name":"fs.read"`, `"arguments":{"path":"a"}`, `"input_tokens":11`, `"output_tokens":5`, `"text":"Look"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the events lack %s: %s", want, b)
		}
	}
}

// Refusals reach the caller as their code at once, without the key: by
// status, and by type for an error event inside the stream.
func TestErrors(t *testing.T) {
	msgs := []driver.Message{{Role: driver.RoleUser, Content: "hi"}}
	for _, c := range []struct {
		name     string
		status   int
		response string
		code     errs.Code
	}{
		{"bad key", 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ` + secret + `"}}`, errs.EACCES},
		{"rate limited", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`, errs.EAGAIN},
		{"too large", 413, `{"type":"error","error":{"type":"request_too_large","message":"big"}}`, errs.EMSGSIZE},
		{"overloaded in the stream", 200, sse("error", `{"type":"error","error":{"type":"overloaded_error","message":"busy `+secret+`"}}`), errs.EAGAIN},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fakeprovider.StartCanned(t, c.status, c.response)
			_, err := run(t, s.URL, driver.Request{Messages: msgs})
			if n := len(s.Requests()); errs.CodeOf(err) != c.code || strings.Contains(err.Error(), secret) || n != 1 {
				t.Fatalf("%v after %d requests, want %s once and no key", err, n, c.code)
			}
		})
	}
	if _, err := run(t, "http://127.0.0.1:9", driver.Request{Messages: []driver.Message{{Role: "robot", Content: "x"}}}); errs.CodeOf(err) != errs.EINVAL {
		t.Errorf("an unknown role: %v", err)
	}
}
