package debug_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/debug"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
)

func run(t *testing.T, ctx context.Context, msgs ...driver.Message) ([]stream.Event, error) {
	t.Helper()
	var evs []stream.Event
	err := debug.Echo{}.Stream(ctx, driver.Request{Messages: msgs}, stream.SinkFunc(func(e stream.Event) error { evs = append(evs, e); return nil }))
	return evs, err
}

func rendered(evs []stream.Event) string {
	b, _ := json.Marshal(evs)
	return string(b)
}

// The echo model answers the last user message with one delta, the same
// message, and its usage in words; scripted "!tool" lines become tool
// calls (numbered, arguments {} when none) until results follow, which
// are then echoed; it is deterministic.
func TestEcho(t *testing.T) {
	user := func(s string) driver.Message { return driver.Message{Role: driver.RoleUser, Content: s} }
	evs, err := run(t, context.Background(), driver.Message{Role: driver.RoleSystem, Content: "be brief"}, user("hello there world"))
	if err != nil || len(evs) != 3 || evs[0].Type != stream.TypeDelta || evs[0].Text != "hello there world" || evs[1].Type != stream.TypeMessage {
		t.Fatalf("echo: %s %v", rendered(evs), err)
	}
	if u := evs[2]; u.Type != stream.TypeUsage || !strings.Contains(rendered(evs[2:]), `"input_tokens":5`) || !strings.Contains(rendered(evs[2:]), `"output_tokens":3`) {
		t.Fatalf("usage %s", rendered(evs[2:]))
	}
	again, _ := run(t, context.Background(), driver.Message{Role: driver.RoleSystem, Content: "be brief"}, user("hello there world"))
	if rendered(again) != rendered(evs) {
		t.Fatal("the same request answered differently")
	}

	script := "look around\n!tool fs.list\n  !tool fs.read {\"path\":\"a\"}  "
	evs, _ = run(t, context.Background(), user(script))
	if len(evs) != 3 || evs[0].Type != stream.TypeToolCall || evs[0].CallID != "call-1" || evs[0].Name != "fs.list" ||
		evs[1].CallID != "call-2" || evs[1].Name != "fs.read" || !strings.Contains(rendered(evs), `"arguments":{"path":"a"}`) ||
		!strings.Contains(rendered(evs[:1]), `"arguments":{}`) {
		t.Fatalf("scripted calls: %s", rendered(evs))
	}
	evs, _ = run(t, context.Background(), user(script),
		driver.Message{Role: driver.RoleAssistant, ToolCalls: []driver.ToolCall{{ID: "call-1", Name: "fs.list"}}},
		driver.Message{Role: driver.RoleTool, CallID: "call-1", Content: "a\nb"},
		driver.Message{Role: driver.RoleTool, CallID: "call-2", Content: "A"})
	if len(evs) != 3 || evs[0].Text != "a\nb\nA" {
		t.Fatalf("results echoed: %s", rendered(evs))
	}
	if calls := debug.Script("no calls here\n!toolish x"); len(calls) != 0 {
		t.Fatalf("Script of plain text: %+v", calls)
	}
}

// No user message is EINVAL; a cancelled context stops the answer.
func TestEchoRefusals(t *testing.T) {
	if _, err := run(t, context.Background(), driver.Message{Role: driver.RoleSystem, Content: "x"}); errs.CodeOf(err) != errs.EINVAL {
		t.Errorf("no user message: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if evs, err := run(t, ctx, driver.Message{Role: driver.RoleUser, Content: "x"}); err == nil || len(evs) != 0 {
		t.Errorf("cancelled: %v after %d events", err, len(evs))
	}
}
