package all

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
	"github.com/cbth-dev/cbth/adapters/cortexfs/object"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/cbth-dev/cbth/internal/testkit/fakeprovider"
)

const secret = "sk-FAKE-SECRET-9f8e7d6c"

type keyOnly struct{ key string }

func (k keyOnly) APIKey(_ context.Context, provider, _ string) (string, error) {
	if k.key == "" {
		return "", errs.New(errs.ENOTCONF, "provider %s is not configured", provider)
	}
	return k.key, nil
}

type backend struct {
	driver   string
	fake     string
	provider string
	// tool call id the fake's wire format carries
	callID string
}

var backends = []backend{
	{"openai-chat", fakeprovider.OpenAIChat, "openai", "call_1"},
	{"openai-responses", fakeprovider.OpenAIResponses, "openai", "call_1"},
	{"anthropic-messages", fakeprovider.Anthropic, "anthropic", "toolu_1"},
	{"gemini", fakeprovider.Gemini, "google", ""},
}

// render turns events into compact lines for comparison.
func render(evs []stream.Event) []string {
	var out []string
	for _, e := range evs {
		b, _ := json.Marshal(e)
		out = append(out, string(b))
	}
	return out
}

func run(t *testing.T, d driver.Driver, provider, base, model string) ([]stream.Event, error) {
	t.Helper()
	var evs []stream.Event
	req := driver.Request{Model: provider + "/" + model, Provider: provider, NativeID: model,
		Messages: []driver.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}},
		Defaults: []object.KV{{Key: "base_url", Value: base}, {Key: "temperature", Value: "0.5"}}}
	err := d.Stream(context.Background(), req, stream.SinkFunc(func(e stream.Event) error {
		if e.Type == stream.TypeStart || e.Type == stream.TypeDone || e.Type == stream.TypeError {
			t.Errorf("driver emitted lifecycle event %s", e.Type)
		}
		evs = append(evs, e)
		return nil
	}))
	return evs, err
}

func TestDriversAgainstFakeProviders(t *testing.T) {
	for _, b := range backends {
		t.Run(b.driver, func(t *testing.T) {
			srv := fakeprovider.Start(b.fake, secret)
			defer srv.Close()
			set := Drivers(sdkdeps.Deps{Creds: keyOnly{secret}})
			d := set[b.driver]
			if d == nil {
				t.Fatalf("driver %s not registered", b.driver)
			}
			usage := `{"type":"usage","input_tokens":5,"output_tokens":2}`
			toolArgs := `"name":"get_weather","arguments":{"city":"Paris"}}`
			callID := ""
			if b.callID != "" {
				callID = `"call_id":"` + b.callID + `",`
			}
			cases := []struct {
				model string
				want  []string
				code  errs.Code
			}{
				{"ok", []string{`{"type":"delta","text":"Hel"}`, `{"type":"delta","text":"lo"}`,
					`{"type":"message","role":"assistant","content":[{"type":"text","text":"Hello"}]}`, usage}, ""},
				{"tool", []string{`{"type":"tool_call",` + callID + toolArgs, usage}, ""},
				{"reason", []string{`{"type":"reasoning_delta","text":"thinking"}`, `{"type":"delta","text":"Hello"}`,
					`{"type":"reasoning_message","role":"assistant","content":[{"type":"text","text":"thinking"}]}`,
					`{"type":"message","role":"assistant","content":[{"type":"text","text":"Hello"}]}`, usage}, ""},
				{"midstream", []string{`{"type":"delta","text":"Hel"}`}, map[string]errs.Code{
					"openai-chat": errs.EHOSTDOWN, "openai-responses": errs.EHOSTDOWN,
					"anthropic-messages": errs.EAGAIN, "gemini": errs.EHOSTDOWN}[b.driver]},
				{"status-401", nil, errs.EACCES},
				{"status-403", nil, errs.EACCES},
				{"status-429", nil, errs.EAGAIN},
				{"status-400", nil, errs.EINVAL},
			}
			for _, c := range cases {
				evs, err := run(t, d, b.provider, srv.BaseURL(), c.model)
				if errs.CodeOf(err) != c.code {
					t.Errorf("%s: err = %v (code %s), want %s", c.model, err, errs.CodeOf(err), c.code)
				}
				if got := render(evs); strings.Join(got, "\n") != strings.Join(c.want, "\n") {
					t.Errorf("%s:\n got %s\nwant %s", c.model, strings.Join(got, "\n     "), strings.Join(c.want, "\n     "))
				}
				if err != nil && strings.Contains(err.Error(), secret) {
					t.Errorf("%s: secret in error: %v", c.model, err)
				}
			}
			// The request reached the provider in its own format: the
			// native model id and the user text are in the body.
			if bodies := srv.Bodies(); len(bodies) == 0 || !strings.Contains(bodies[0], `"hi"`) {
				t.Errorf("request body lacks the user message: %v", bodies)
			}
			if strings.Contains(strings.Join(srv.Bodies(), ""), secret) {
				t.Error("secret sent in a request body")
			}

			// A wrong key: the fake quotes it back; it must be scrubbed.
			wrong := Drivers(sdkdeps.Deps{Creds: keyOnly{"sk-WRONG-KEY-555"}})[b.driver]
			_, err := run(t, wrong, b.provider, srv.BaseURL(), "ok")
			if errs.CodeOf(err) != errs.EACCES || strings.Contains(err.Error(), "sk-WRONG-KEY-555") {
				t.Errorf("wrong key: %v", err)
			}
			// Nothing listening.
			_, err = run(t, d, b.provider, fakeprovider.ClosedURL(), "ok")
			if errs.CodeOf(err) != errs.EHOSTDOWN || errs.CodeOf(err).ExitCode() != 69 {
				t.Errorf("closed port: %v", err)
			}
			// No credential.
			none := Drivers(sdkdeps.Deps{Creds: keyOnly{}})[b.driver]
			_, err = run(t, none, b.provider, srv.BaseURL(), "ok")
			if errs.CodeOf(err) != errs.ENOTCONF {
				t.Errorf("no key: %v", err)
			}
		})
	}
}

func TestCancelledContextStopsDriver(t *testing.T) {
	for _, b := range backends {
		srv := fakeprovider.Start(b.fake, secret)
		d := Drivers(sdkdeps.Deps{Creds: keyOnly{secret}})[b.driver]
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := driver.Request{Model: b.provider + "/ok", Provider: b.provider, NativeID: "ok",
			Messages: []driver.Message{{Role: "user", Content: "hi"}},
			Defaults: []object.KV{{Key: "base_url", Value: srv.BaseURL()}}}
		err := d.Stream(ctx, req, stream.SinkFunc(func(stream.Event) error { return nil }))
		if !driver.Canceled(ctx, err) {
			t.Errorf("%s: cancelled run returned %v", b.driver, err)
		}
		srv.Close()
	}
}

func TestCustomProviderNeedsBaseURL(t *testing.T) {
	d := Drivers(sdkdeps.Deps{Creds: keyOnly{secret}})["openai-chat"]
	req := driver.Request{Model: "api.lmm.best/m", Provider: "api.lmm.best", NativeID: "m",
		Messages: []driver.Message{{Role: "user", Content: "hi"}}}
	err := d.Stream(context.Background(), req, stream.SinkFunc(func(stream.Event) error { return nil }))
	if errs.CodeOf(err) != errs.ENOTCONF {
		t.Fatalf("got %v", err)
	}
}

func TestDebugEcho(t *testing.T) {
	d := Drivers(sdkdeps.Deps{})["debug"]
	var evs []stream.Event
	err := d.Stream(context.Background(), driver.Request{Messages: []driver.Message{
		{Role: "user", Content: "first words"}, {Role: "assistant", Content: "x"}, {Role: "user", Content: "hello there"}}},
		stream.SinkFunc(func(e stream.Event) error { evs = append(evs, e); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"type":"delta","text":"hello there"}`,
		`{"type":"message","role":"assistant","content":[{"type":"text","text":"hello there"}]}`,
		`{"type":"usage","input_tokens":5,"output_tokens":2}`}
	if got := render(evs); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got %v", got)
	}
	err = d.Stream(context.Background(), driver.Request{Messages: []driver.Message{{Role: "assistant", Content: "x"}}},
		stream.SinkFunc(func(stream.Event) error { return nil }))
	if errs.CodeOf(err) != errs.EINVAL {
		t.Fatalf("no user message: %v", err)
	}
}

// The helper serves exactly the drivers cbth forwards to it, plus debug.
func TestHelperServesProviderNames(t *testing.T) {
	set := Drivers(sdkdeps.Deps{})
	want := append([]string{"debug"}, provider.Names...)
	if len(set) != len(want) {
		t.Fatalf("helper has %d drivers, cbth forwards %v", len(set), want)
	}
	for _, n := range want {
		if set[n] == nil {
			t.Errorf("helper lacks %s", n)
		}
	}
}
