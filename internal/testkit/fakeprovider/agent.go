package fakeprovider

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

// The agent scenario (model id AgentModel) plays one turn of an agent's
// model + tool loop in each kind's own wire format:
//
//   - a request that offers no tool named AgentTool is a 400: the driver
//     did not send the agent's tool definitions;
//   - a request without a tool result answers with a call to AgentTool
//     with AgentArgs (call id AgentCallID, where the format has ids);
//   - a request that carries the result, in the provider's own shape and
//     answering that call (the assistant's call is in the history too),
//     answers AgentAnswer followed by the result text;
//   - a result that answers no call the history holds is a 400, as the
//     real APIs reject it.
const (
	AgentModel  = "agent"
	AgentTool   = "fs_read"
	AgentArgs   = `{"path":"note.txt"}`
	AgentCallID = "call_agent_1"
	AgentAnswer = "the note says: "
)

// agentTurn decides the agent scenario's reply: the events to stream, or
// an HTTP status and message to fail with.
func (s *Server) agentTurn(body []byte) ([]sse, int, string) {
	b := gjson.ParseBytes(body)
	var offered []string
	var calls, results []gjson.Result // the calls in history, the results
	resultText := func(r gjson.Result) string { return r.String() }
	callOf := func(r gjson.Result) string { return r.Get("id").String() }
	resultCall := func(r gjson.Result) string { return r.Get("tool_call_id").String() }
	switch s.Kind {
	case OpenAIChat:
		for _, t := range b.Get("tools").Array() {
			if t.Get("type").String() == "function" {
				offered = append(offered, t.Get("function.name").String())
			}
		}
		for _, m := range b.Get("messages").Array() {
			calls = append(calls, m.Get("tool_calls").Array()...)
			if m.Get("role").String() == "tool" {
				results = append(results, m)
			}
		}
		resultText = func(r gjson.Result) string { return r.Get("content").String() }
	case OpenAIResponses:
		for _, t := range b.Get("tools").Array() {
			if t.Get("type").String() == "function" {
				offered = append(offered, t.Get("name").String())
			}
		}
		for _, it := range b.Get("input").Array() {
			switch it.Get("type").String() {
			case "function_call":
				calls = append(calls, it)
			case "function_call_output":
				results = append(results, it)
			}
		}
		callOf = func(r gjson.Result) string { return r.Get("call_id").String() }
		resultCall = callOf
		resultText = func(r gjson.Result) string { return r.Get("output").String() }
	case Anthropic:
		for _, t := range b.Get("tools").Array() {
			offered = append(offered, t.Get("name").String())
		}
		for _, m := range b.Get("messages").Array() {
			for _, c := range m.Get("content").Array() {
				switch c.Get("type").String() {
				case "tool_use":
					calls = append(calls, c)
				case "tool_result":
					results = append(results, c)
				}
			}
		}
		resultCall = func(r gjson.Result) string { return r.Get("tool_use_id").String() }
		resultText = func(r gjson.Result) string {
			c := r.Get("content")
			if c.IsArray() {
				var sb strings.Builder
				for _, p := range c.Array() {
					sb.WriteString(p.Get("text").String())
				}
				return sb.String()
			}
			return c.String()
		}
	case Gemini:
		for _, t := range b.Get("tools").Array() {
			for _, d := range t.Get("functionDeclarations").Array() {
				offered = append(offered, d.Get("name").String())
			}
		}
		for _, c := range b.Get("contents").Array() {
			for _, p := range c.Get("parts").Array() {
				if p.Get("functionCall").Exists() {
					calls = append(calls, p.Get("functionCall"))
				}
				if p.Get("functionResponse").Exists() {
					results = append(results, p.Get("functionResponse"))
				}
			}
		}
		// Gemini pairs a response with its call by name.
		callOf = func(r gjson.Result) string { return r.Get("name").String() }
		resultCall = callOf
		resultText = func(r gjson.Result) string { return r.Get("response.output").String() }
	}
	found := false
	for _, n := range offered {
		found = found || n == AgentTool
	}
	if !found {
		return nil, 400, fmt.Sprintf("tool %s is not offered (offered %v)", AgentTool, offered)
	}
	if len(results) == 0 {
		return s.script("agent-call"), 0, ""
	}
	res := results[len(results)-1]
	for _, c := range calls {
		if callOf(c) == resultCall(res) {
			return s.answer(AgentAnswer + resultText(res)), 0, ""
		}
	}
	return nil, 400, fmt.Sprintf("tool result for %q answers no call in the history", resultCall(res))
}

// answer is a final text reply in one delta, then usage.
func (s *Server) answer(text string) []sse {
	q, _ := json.Marshal(text)
	switch s.Kind {
	case OpenAIChat:
		return []sse{
			{data: fmt.Sprintf(`{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1,"model":"agent","choices":[{"index":0,"delta":{"role":"assistant","content":%s},"finish_reason":null}]}`, q)},
			{data: `{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1,"model":"agent","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`},
			{data: `{"id":"chatcmpl-2","object":"chat.completion.chunk","created":1,"model":"agent","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`},
			{data: "[DONE]"},
		}
	case OpenAIResponses:
		all := responsesScript("ok")
		delta := all[1]
		delta.data = fmt.Sprintf(`{"type":"response.output_text.delta","sequence_number":0,"item_id":"msg_1","output_index":0,"content_index":0,"delta":%s}`, q)
		return []sse{all[0], delta, all[len(all)-1]}
	case Anthropic:
		all := anthropicScript("ok")
		// start, block start, ping, delta, delta, stop, message_delta, message_stop
		delta := all[3]
		delta.data = fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%s}}`, q)
		return append([]sse{all[0], all[1], delta}, all[5:]...)
	default:
		return []sse{{data: fmt.Sprintf(`{"candidates":[{"content":{"parts":[{"text":%s}],"role":"model"},"index":0}],"modelVersion":"agent","usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":2,"totalTokenCount":7}}`, q)}}
	}
}
