// Package fakeprovider runs local stand-ins for the OpenAI, Anthropic and
// Gemini HTTP APIs on 127.0.0.1, speaking their real streaming wire formats
// (SSE). Tests pick a scenario through the model id they request:
//
//	ok         text in two deltas, then usage
//	tool       a tool call (function get_weather, {"city":"Paris"})
//	agent      one turn of an agent's tool loop (agent.go)
//	reason     reasoning text, then the answer
//	midstream  one delta, then an in-stream error event
//	status-N   an HTTP error N with the provider's error body
//	hang       the first event of ok, then nothing until the client goes
//	           away (or HangLimit passes)
//
// Every request must carry the expected API key, or it gets a 401.
//
// The Codex kind (codex.go) is scripted differently: by markers in the
// prompt, for the Codex CLI's own model calls.
package fakeprovider

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HangLimit bounds how long a hang request is held open.
const HangLimit = 30 * time.Second

// Kinds of provider the server imitates.
const (
	OpenAIChat      = "openai-chat"
	OpenAIResponses = "openai-responses"
	Anthropic       = "anthropic"
	Gemini          = "gemini"
)

// Server is one fake provider.
type Server struct {
	Kind string
	Key  string
	srv  *httptest.Server

	mu       sync.Mutex
	bodies   []string
	requests []Request     // the Codex kind's log
	scripts  []script      // the Codex kind's scripted prompts
	hang     chan struct{} // closed by Release
}

// Start listens on 127.0.0.1 and serves kind.
func Start(kind, key string) *Server {
	s := &Server{Kind: kind, Key: key, hang: make(chan struct{})}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.handle))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	s.srv.Listener = ln
	s.srv.Start()
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// BaseURL is what a model's base_url default should be for this kind.
func (s *Server) BaseURL() string {
	switch s.Kind {
	case OpenAIChat, OpenAIResponses:
		return s.srv.URL + "/v1/"
	case Codex:
		// Codex appends /responses itself.
		return s.srv.URL + "/v1"
	default:
		return s.srv.URL + "/"
	}
}

// Bodies returns the request bodies received so far.
func (s *Server) Bodies() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

// ClosedURL returns a loopback URL where nothing listens.
func ClosedURL() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/"
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	// Codex sends its whole history on every call: allow a long thread.
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	s.mu.Lock()
	s.bodies = append(s.bodies, string(body))
	s.mu.Unlock()

	var got, model string
	switch s.Kind {
	case Codex:
		// Codex sends a key only when its provider names an env_key.
		if got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "); got != s.Key {
			s.failMsg(w, 401, "incorrect API key provided: "+got)
			return
		}
		s.handleCodex(w, r, body)
		return
	case OpenAIChat, OpenAIResponses:
		got = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		var b struct{ Model string }
		_ = json.Unmarshal(body, &b)
		model = b.Model
	case Anthropic:
		got = r.Header.Get("X-Api-Key")
		var b struct{ Model string }
		_ = json.Unmarshal(body, &b)
		model = b.Model
	case Gemini:
		got = r.Header.Get("X-Goog-Api-Key")
		if got == "" {
			got = r.URL.Query().Get("key")
		}
		// /v1beta/models/<model>:streamGenerateContent
		model = strings.TrimPrefix(r.URL.Path, "/v1beta/models/")
		model, _, _ = strings.Cut(model, ":")
		if r.URL.Query().Get("alt") != "sse" {
			s.fail(w, 400)
			return
		}
	}
	if got != s.Key {
		// Real providers quote (part of) a rejected key back; the driver
		// must scrub it before anything reaches output.
		s.failMsg(w, 401, "incorrect API key provided: "+got)
		return
	}
	if n, ok := strings.CutPrefix(model, "status-"); ok {
		code, _ := strconv.Atoi(n)
		s.fail(w, code)
		return
	}
	script := s.script(model)
	if model == AgentModel {
		var status int
		var msg string
		if script, status, msg = s.agentTurn(body); status != 0 {
			s.failMsg(w, status, msg)
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	if model == "hang" {
		script = s.script("ok")[:1]
	}
	for _, ev := range script {
		if ev.name != "" {
			fmt.Fprintf(w, "event: %s\n", ev.name)
		}
		fmt.Fprintf(w, "data: %s\n\n", ev.data)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	if model == "hang" {
		select {
		case <-r.Context().Done():
		case <-time.After(HangLimit):
		}
	}
}

func (s *Server) fail(w http.ResponseWriter, code int) {
	s.failMsg(w, code, map[int]string{400: "bad request", 401: "invalid api key", 429: "too many requests"}[code])
}

func (s *Server) failMsg(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	typ := map[int]string{400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}[code]
	switch s.Kind {
	case Anthropic:
		fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
	case Gemini:
		status := map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 429: "RESOURCE_EXHAUSTED"}[code]
		fmt.Fprintf(w, `{"error":{"code":%d,"message":%q,"status":%q}}`, code, msg, status)
	default:
		fmt.Fprintf(w, `{"error":{"message":%q,"type":%q,"param":null,"code":null}}`, msg, typ)
	}
}

type sse struct{ name, data string }

func (s *Server) script(model string) []sse {
	switch s.Kind {
	case OpenAIChat:
		return chatScript(model)
	case OpenAIResponses:
		return responsesScript(model)
	case Anthropic:
		return anthropicScript(model)
	default:
		return geminiScript(model)
	}
}

func chatScript(model string) []sse {
	chunk := func(delta string, finish string) sse {
		fr := "null"
		if finish != "" {
			fr = strconv.Quote(finish)
		}
		return sse{data: fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`, model, delta, fr)}
	}
	usage := sse{data: fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":%q,"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`, model)}
	done := sse{data: "[DONE]"}
	switch model {
	case "agent-call":
		args, _ := json.Marshal(AgentArgs)
		return []sse{
			chunk(fmt.Sprintf(`{"role":"assistant","tool_calls":[{"index":0,"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}]}`, AgentCallID, AgentTool, args), ""),
			chunk(`{}`, "tool_calls"), usage, done,
		}
	case "tool":
		return []sse{
			chunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}`, ""),
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`, ""),
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`, ""),
			chunk(`{}`, "tool_calls"), usage, done,
		}
	case "reason":
		return []sse{
			chunk(`{"role":"assistant","content":"","reasoning_content":"thinking"}`, ""),
			chunk(`{"content":"Hello"}`, ""), chunk(`{}`, "stop"), usage, done,
		}
	case "midstream":
		return []sse{
			chunk(`{"role":"assistant","content":"Hel"}`, ""),
			{data: `{"error":{"message":"upstream failed","type":"server_error","param":null,"code":null}}`},
		}
	default:
		return []sse{chunk(`{"role":"assistant","content":"Hel"}`, ""), chunk(`{"content":"lo"}`, ""), chunk(`{}`, "stop"), usage, done}
	}
}

func responsesScript(model string) []sse {
	ev := func(typ, rest string) sse {
		return sse{name: typ, data: fmt.Sprintf(`{"type":%q,"sequence_number":0%s}`, typ, rest)}
	}
	created := ev("response.created", fmt.Sprintf(`,"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":%q,"output":[]}`, model))
	completed := ev("response.completed", fmt.Sprintf(`,"response":{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":%q,"output":[],"usage":{"input_tokens":5,"output_tokens":2,"total_tokens":7,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}}`, model))
	text := func(d string) sse {
		return ev("response.output_text.delta", fmt.Sprintf(`,"item_id":"msg_1","output_index":0,"content_index":0,"delta":%q`, d))
	}
	switch model {
	case "agent-call":
		args, _ := json.Marshal(AgentArgs)
		return []sse{created,
			ev("response.output_item.done", fmt.Sprintf(`,"output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":%q,"name":%q,"arguments":%s,"status":"completed"}`, AgentCallID, AgentTool, args)),
			completed}
	case "tool":
		return []sse{created,
			ev("response.function_call_arguments.delta", `,"item_id":"fc_1","output_index":0,"delta":"{\"city\":\"Paris\"}"`),
			ev("response.output_item.done", `,"output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}`),
			completed}
	case "reason":
		return []sse{created,
			ev("response.reasoning_summary_text.delta", `,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"thinking"`),
			text("Hello"), completed}
	case "midstream":
		return []sse{created, text("Hel"), ev("error", `,"code":"server_error","message":"upstream failed","param":null`)}
	default:
		return []sse{created, text("Hel"), text("lo"), completed}
	}
}

func anthropicScript(model string) []sse {
	ev := func(typ, rest string) sse {
		return sse{name: typ, data: fmt.Sprintf(`{"type":%q%s}`, typ, rest)}
	}
	start := ev("message_start", fmt.Sprintf(`,"message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":%q,"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}`, model))
	ping := ev("ping", "")
	blockStart := func(i int, block string) sse {
		return ev("content_block_start", fmt.Sprintf(`,"index":%d,"content_block":%s`, i, block))
	}
	delta := func(i int, d string) sse {
		return ev("content_block_delta", fmt.Sprintf(`,"index":%d,"delta":%s`, i, d))
	}
	stop := func(i int) sse { return ev("content_block_stop", fmt.Sprintf(`,"index":%d`, i)) }
	end := func(reason string) []sse {
		return []sse{ev("message_delta", fmt.Sprintf(`,"delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":2}`, reason)), ev("message_stop", "")}
	}
	switch model {
	case "agent-call":
		args, _ := json.Marshal(AgentArgs)
		return append([]sse{start,
			blockStart(0, fmt.Sprintf(`{"type":"tool_use","id":%q,"name":%q,"input":{}}`, AgentCallID, AgentTool)),
			delta(0, fmt.Sprintf(`{"type":"input_json_delta","partial_json":%s}`, args)),
			stop(0)}, end("tool_use")...)
	case "tool":
		return append([]sse{start,
			blockStart(0, `{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}`),
			delta(0, `{"type":"input_json_delta","partial_json":""}`),
			delta(0, `{"type":"input_json_delta","partial_json":"{\"city\":"}`),
			delta(0, `{"type":"input_json_delta","partial_json":"\"Paris\"}"}`),
			stop(0)}, end("tool_use")...)
	case "reason":
		return append([]sse{start,
			blockStart(0, `{"type":"thinking","thinking":"","signature":""}`),
			delta(0, `{"type":"thinking_delta","thinking":"thinking"}`),
			delta(0, `{"type":"signature_delta","signature":"sig"}`),
			stop(0),
			blockStart(1, `{"type":"text","text":""}`),
			delta(1, `{"type":"text_delta","text":"Hello"}`),
			stop(1)}, end("end_turn")...)
	case "midstream":
		return []sse{start, blockStart(0, `{"type":"text","text":""}`), delta(0, `{"type":"text_delta","text":"Hel"}`),
			{name: "error", data: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}}
	default:
		return append([]sse{start, blockStart(0, `{"type":"text","text":""}`), ping,
			delta(0, `{"type":"text_delta","text":"Hel"}`), delta(0, `{"type":"text_delta","text":"lo"}`), stop(0)}, end("end_turn")...)
	}
}

func geminiScript(model string) []sse {
	chunk := func(parts string, tail string) sse {
		return sse{data: fmt.Sprintf(`{"candidates":[{"content":{"parts":%s,"role":"model"},"index":0%s}],"modelVersion":%q%s}`, parts, "", model, tail)}
	}
	usage := `,"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":2,"totalTokenCount":7}`
	switch model {
	case "agent-call":
		return []sse{chunk(fmt.Sprintf(`[{"functionCall":{"name":%q,"args":%s}}]`, AgentTool, AgentArgs), usage)}
	case "tool":
		return []sse{chunk(`[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}]`, usage)}
	case "reason":
		return []sse{chunk(`[{"text":"thinking","thought":true}]`, ""), chunk(`[{"text":"Hello"}]`, usage)}
	case "midstream":
		return []sse{chunk(`[{"text":"Hel"}]`, ""), {data: `{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}`}}
	default:
		return []sse{chunk(`[{"text":"Hel"}]`, ""), chunk(`[{"text":"lo"}]`, usage)}
	}
}
