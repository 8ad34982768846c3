package gemini_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/gemini"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

const secret = "AIza-TEST-1234567890"

type key string

func (k key) APIKey(context.Context, string, string) (string, error) { return string(k), nil }

func sse(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\r\n\r\n")
	}
	return b.String()
}

func run(t *testing.T, base string, req driver.Request) ([]stream.Event, error) {
	t.Helper()
	req.Provider, req.Model, req.NativeID = "google", "google/m", "m"
	req.Defaults = append(req.Defaults, object.KV{Key: "base_url", Value: base})
	d := gemini.Drivers(sdkdeps.Deps{Creds: key(secret)})[gemini.Name]
	var evs []stream.Event
	err := d.Stream(context.Background(), req, stream.SinkFunc(func(e stream.Event) error { evs = append(evs, e); return nil }))
	return evs, err
}

// The request: the system instruction apart, the model's calls as
// function calls with object arguments, one turn's results together in
// one user content (paired by name and id), function declarations under
// wire names, the defaults; the stream: thoughts and text as deltas, a
// call with canonical name, the usage.
func TestRequestAndStream(t *testing.T) {
	s := fakeprovider.StartCanned(t, 200, sse(
		`{"candidates":[{"content":{"role":"model","parts":[{"text":"hmm","thought":true}]}}]}`,
		`{"candidates":[{"content":{"role":"model","parts":[{"text":"Look"}]}}]}`,
		`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"id":"g1","name":"fs_read","args":{"path":"a"}}}]}}],"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":4}}`))
	evs, err := run(t, s.URL, driver.Request{
		Messages: []driver.Message{
			{Role: driver.RoleSystem, Content: "be brief"},
			{Role: driver.RoleUser, Content: "read a and b"},
			{Role: driver.RoleAssistant, ToolCalls: []driver.ToolCall{{ID: "g0", Name: "fs.read", Arguments: json.RawMessage(`{"path":"a"}`)}, {ID: "g9", Name: "fs.read"}}},
			{Role: driver.RoleTool, CallID: "g0", Name: "fs.read", Content: "A"},
			{Role: driver.RoleTool, CallID: "g9", Name: "fs.read", Content: "B"},
			{Role: driver.RoleUser, Content: "again"},
		},
		Tools:    []driver.ToolDef{{Name: "fs.read", Description: "read"}},
		Defaults: []object.KV{{Key: "temperature", Value: "0.5"}, {Key: "max_tokens", Value: "50"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || !strings.Contains(reqs[0].Path, "m:streamGenerateContent") || reqs[0].Header.Get("X-Goog-Api-Key") != secret {
		t.Fatalf("requests %+v", reqs)
	}
	b := reqs[0].Body
	if si := b["systemInstruction"].(map[string]any)["parts"].([]any); si[0].(map[string]any)["text"] != "be brief" {
		t.Errorf("system instruction %v", si)
	}
	contents := b["contents"].([]any)
	var roles []string
	for _, c := range contents {
		roles = append(roles, c.(map[string]any)["role"].(string))
	}
	if strings.Join(roles, " ") != "user model user user" {
		t.Fatalf("roles %v", roles)
	}
	calls := contents[1].(map[string]any)["parts"].([]any)
	fc := calls[0].(map[string]any)["functionCall"].(map[string]any)
	if len(calls) != 2 || fc["name"] != "fs_read" || fc["args"].(map[string]any)["path"] != "a" {
		t.Errorf("the model's calls %v", calls)
	}
	results := contents[2].(map[string]any)["parts"].([]any)
	fr := results[1].(map[string]any)["functionResponse"].(map[string]any)
	if len(results) != 2 || fr["id"] != "g9" || fr["name"] != "fs_read" || fr["response"].(map[string]any)["output"] != "B" {
		t.Errorf("one turn's results %v", results)
	}
	gc := b["generationConfig"].(map[string]any)
	if gc["temperature"] != 0.5 || gc["maxOutputTokens"] != 50.0 {
		t.Errorf("generation config %v", gc)
	}
	decl := b["tools"].([]any)[0].(map[string]any)["functionDeclarations"].([]any)[0].(map[string]any)
	if decl["name"] != "fs_read" || decl["description"] != "read" {
		t.Errorf("declaration %v", decl)
	}
	var types []string
	for _, e := range evs {
		types = append(types, string(e.Type))
	}
	if got := strings.Join(types, " "); got != "reasoning_delta delta tool_call reasoning_message message usage" {
		t.Fatalf("events %s", got)
	}
	out, _ := json.Marshal(evs)
	for _, want := range []string{`"name":"fs.read"`, `"call_id":"g1"`, `"arguments":{"path":"a"}`, `"input_tokens":8`, `"output_tokens":4`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the events lack %s: %s", want, out)
		}
	}
}

// Refusals by status, coded, without the key; a provider that is not
// Google's needs a base_url.
func TestErrors(t *testing.T) {
	msgs := []driver.Message{{Role: driver.RoleUser, Content: "hi"}}
	for _, c := range []struct {
		name   string
		status int
		body   string
		code   errs.Code
	}{
		{"bad key", 403, `{"error":{"code":403,"message":"API key ` + secret + ` not valid","status":"PERMISSION_DENIED"}}`, errs.EACCES},
		{"quota", 429, `{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}`, errs.EAGAIN},
		{"bad request", 400, `{"error":{"code":400,"message":"bad","status":"INVALID_ARGUMENT"}}`, errs.EINVAL},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := fakeprovider.StartCanned(t, c.status, c.body)
			if _, err := run(t, srv.URL, driver.Request{Messages: msgs}); errs.CodeOf(err) != c.code || strings.Contains(err.Error(), secret) {
				t.Fatalf("%v, want %s without the key", err, c.code)
			}
		})
	}
	d := gemini.Drivers(sdkdeps.Deps{Creds: key(secret)})[gemini.Name]
	err := d.Stream(context.Background(), driver.Request{Provider: "acme", Model: "acme/m", NativeID: "m", Messages: msgs},
		stream.SinkFunc(func(stream.Event) error { return nil }))
	if errs.CodeOf(err) != errs.ENOTCONF {
		t.Errorf("another provider without base_url: %v", err)
	}
}
