package all

import (
	"context"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/adapters/cortexfs/tool"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

// TestDriversRunToolLoop plays an agent's two model calls against each
// fake provider: the first offers the tools in the provider's own shape
// and gets a call back (under its canonical name, fs.read, though the
// wire name is fs_read); the second sends the assistant's call and the
// tool's result back in the provider's shape and gets the final answer.
// The fake rejects a request that does not offer the tool or whose result
// answers no call in the history, so a driver that drops either fails.
func TestDriversRunToolLoop(t *testing.T) {
	read, _ := tool.Lookup(tool.FSRead)
	shell, _ := tool.Lookup(tool.ShellExec)
	defs := []driver.ToolDef{
		{Name: read.Name, Description: read.Description, Parameters: read.Parameters},
		{Name: shell.Name, Description: shell.Description, Parameters: shell.Parameters},
	}
	// How each format spells an offered function, and a tool result.
	shapes := map[string][2]string{
		"openai-chat":        {`"tools":[{"function":{"name":"fs_read"`, `"role":"tool"`},
		"openai-responses":   {`"type":"function"`, `"type":"function_call_output"`},
		"anthropic-messages": {`"input_schema":{`, `"type":"tool_result"`},
		"gemini":             {`"functionDeclarations":[`, `"functionResponse":{`},
	}
	for _, b := range backends {
		t.Run(b.driver, func(t *testing.T) {
			srv := fakeprovider.Start(b.fake, secret)
			defer srv.Close()
			d := Drivers(sdkdeps.Deps{Creds: keyOnly{secret}})[b.driver]
			call := func(msgs []driver.Message) []stream.Event {
				t.Helper()
				req := driver.Request{Model: b.provider + "/agent", Provider: b.provider, NativeID: fakeprovider.AgentModel,
					Messages: msgs, Tools: defs, Defaults: []object.KV{{Key: "base_url", Value: srv.BaseURL()}}}
				var evs []stream.Event
				if err := d.Stream(context.Background(), req, stream.SinkFunc(func(e stream.Event) error {
					evs = append(evs, e)
					return nil
				})); err != nil {
					t.Fatalf("stream: %v", err)
				}
				return evs
			}
			msgs := []driver.Message{{Role: driver.RoleSystem, Content: "be brief"}, {Role: driver.RoleUser, Content: "what does the note say?"}}
			evs := call(msgs)
			var tc *stream.Event
			for i := range evs {
				if evs[i].Type == stream.TypeToolCall {
					tc = &evs[i]
				}
			}
			if tc == nil || tc.Name != tool.FSRead || string(tc.Arguments) != fakeprovider.AgentArgs {
				t.Fatalf("first call: want a fs.read call, got %s", strings.Join(render(evs), "\n"))
			}
			msgs = append(msgs,
				driver.Message{Role: driver.RoleAssistant, ToolCalls: []driver.ToolCall{{ID: tc.CallID, Name: tc.Name, Arguments: tc.Arguments}}},
				driver.Message{Role: driver.RoleTool, CallID: tc.CallID, Name: tc.Name, Content: "hello from the note"})
			evs = call(msgs)
			want := `{"type":"message","role":"assistant","content":[{"type":"text","text":"the note says: hello from the note"}]}`
			if got := render(evs); !strings.Contains(strings.Join(got, "\n"), want) {
				t.Fatalf("second call: got %s", strings.Join(got, "\n"))
			}
			bodies := srv.Bodies()
			if len(bodies) != 2 {
				t.Fatalf("%d requests", len(bodies))
			}
			for i, body := range bodies {
				if !strings.Contains(body, shapes[b.driver][0]) || !strings.Contains(body, `"fs_read"`) || !strings.Contains(body, `"shell_exec"`) {
					t.Errorf("request %d does not offer the tools in the %s shape: %s", i, b.driver, body)
				}
				// The schema travels: fs.read's required path.
				if !strings.Contains(body, `"required":["path"]`) {
					t.Errorf("request %d lacks fs.read's schema: %s", i, body)
				}
			}
			if !strings.Contains(bodies[1], shapes[b.driver][1]) {
				t.Errorf("second request has no tool result in the %s shape: %s", b.driver, bodies[1])
			}
		})
	}
}

// A request without tools gets the fake's 400: the check above has teeth.
func TestFakeAgentNeedsTools(t *testing.T) {
	for _, b := range backends {
		srv := fakeprovider.Start(b.fake, secret)
		d := Drivers(sdkdeps.Deps{Creds: keyOnly{secret}})[b.driver]
		req := driver.Request{Model: b.provider + "/agent", Provider: b.provider, NativeID: fakeprovider.AgentModel,
			Messages: []driver.Message{{Role: driver.RoleUser, Content: "hi"}}, Defaults: []object.KV{{Key: "base_url", Value: srv.BaseURL()}}}
		err := d.Stream(context.Background(), req, stream.SinkFunc(func(stream.Event) error { return nil }))
		if err == nil || !strings.Contains(err.Error(), "not offered") {
			t.Errorf("%s: no tools: %v", b.driver, err)
		}
		srv.Close()
	}
}

func TestToolNames(t *testing.T) {
	n, err := driver.NewToolNames([]driver.ToolDef{{Name: "fs.read"}, {Name: "cbth.job.submit"}})
	if err != nil {
		t.Fatal(err)
	}
	if n.Wire("fs.read") != "fs_read" || n.Canonical("fs_read") != "fs.read" || n.Canonical("cbth_job_submit") != "cbth.job.submit" {
		t.Fatalf("mapping: %v", n)
	}
	if n.Canonical("rm_rf") != "rm_rf" {
		t.Fatal("an unknown wire name must come back unchanged")
	}
	if _, err := driver.NewToolNames([]driver.ToolDef{{Name: "a.b"}, {Name: "a_b"}}); err == nil {
		t.Fatal("colliding wire names accepted")
	}
}
