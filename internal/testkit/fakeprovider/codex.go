package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Codex is the kind that stands in for the model behind the Codex CLI: the
// OpenAI Responses API as Codex consumes it. Unlike the other kinds it is
// scripted by markers in the latest user message, because Codex names one
// model for every turn of a thread:
//
//	(none)        "ECHO: <text>" streamed as the full item sequence
//	MarkSlow      the same, in SlowDeltas deltas SlowStep apart
//	MarkHang      the first delta, then nothing until Release, the client
//	              going away, or HangLimit; after Release the rest follows
//	MarkFail      response.failed: Codex fails the turn
//	MarkTool cmd  an exec_command call for cmd (the rest of the line) that
//	              asks for escalation, so Codex requests approval under
//	              on-request; once the output comes back, "TOOL OUTPUT: <out>"
//	MarkRun cmd   the same call without asking for escalation: under a
//	              sandbox that allows it (danger-full-access) it just runs
//	MarkMCP ns/tool {args}
//	              a call of an MCP tool as Codex names it (namespace
//	              mcp__SERVER, the tool's own name); once the output comes
//	              back, "TOOL OUTPUT: <out>"
//
// A prompt with no marker can be scripted too (Script): a user's plain
// words, answered by a tool search and a tool call, as a real model would.
//
// Codex's title-generation calls get a short title whatever they contain.
// Every request is logged (Requests, Count).
const Codex = "codex-responses"

// The markers a Codex test puts in its prompt.
const (
	MarkSlow = "[fake:slow]"
	MarkHang = "[fake:hang]"
	MarkFail = "[fake:fail]"
	MarkTool = "[fake:tool]"
	MarkRun  = "[fake:run]"
	MarkMCP  = "[fake:mcp]"
)

// Step is one model action of a script: a tool_search (Query set) or a
// call of an MCP tool (Namespace, Name, Args). ArgsFrom, when set, makes
// the arguments from the tool outputs of the turn so far, as a model
// reading them would; an empty result ends the turn there (the model
// stops). Before runs just before the step is sent.
type Step struct {
	Query     string
	Namespace string
	Name      string
	Args      string
	ArgsFrom  func(outputs []string) string
	Before    func()
}

// script answers the turns whose prompt contains match.
type script struct {
	match string
	steps []Step
}

// Script makes every turn whose prompt contains match take steps, one per
// model call (the first call of the turn takes the first step; the call
// after its output, the next), then answer "TOOL OUTPUT: <last output>".
func (s *Server) Script(match string, steps ...Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scripts = append(s.scripts, script{match, steps})
}

// stepReady is false for a step whose arguments come out empty: the
// model stops there and answers with the last output instead.
func (s *Server) stepReady(st Step, outputs []string) bool {
	return st.ArgsFrom == nil || st.ArgsFrom(outputs) != ""
}

func (s *Server) scripted(user string) []Step {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range s.scripts {
		if strings.Contains(user, sc.match) {
			return sc.steps
		}
	}
	return nil
}

// SlowDeltas and SlowStep shape a MarkSlow reply: about a second in all.
const (
	SlowDeltas = 10
	SlowStep   = 100 * time.Millisecond
)

// TitleReply is the answer to every title-generation call.
const TitleReply = "Fake task title"

// titlePrompt opens the prompt of Codex's title-generation calls (made on
// an ephemeral thread after a TUI turn).
const titlePrompt = "single-line task title"

// Request is one model call as the Codex kind saw it.
type Request struct {
	Path     string
	ThreadID string // Codex's thread-id header
	// UserText is the text of the last user message in the input: the
	// prompt that caused this call (earlier turns are in the input too).
	UserText string
	// ToolOutput is set when a tool result follows that message: the call
	// continues a turn after a tool ran rather than starting one.
	ToolOutput bool
	// Outputs counts the tool results (function calls and tool searches)
	// after that message; OutputTexts holds the function calls' ones.
	Outputs     int
	OutputTexts []string
	Title       bool // a title-generation call
	Body        []byte
}

// Requests returns the model calls the Codex kind has received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Count returns how many model calls, title calls aside, were prompted by a
// user message containing marker. A turn whose prompt reached the model
// once counts 1; a turn Codex retried, or that ran a tool, counts more.
func (s *Server) Count(marker string) int {
	n := 0
	for _, r := range s.Requests() {
		if !r.Title && strings.Contains(r.UserText, marker) {
			n++
		}
	}
	return n
}

// Release lets every MarkHang call now waiting finish its reply. Calls that
// arrive later hang until the next Release.
func (s *Server) Release() {
	s.mu.Lock()
	close(s.hang)
	s.hang = make(chan struct{})
	s.mu.Unlock()
}

// codexBody is the part of a Responses request the Codex kind reads.
type codexBody struct {
	Instructions string `json:"instructions"`
	Input        []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
		Output  json.RawMessage `json:"output"`
		Tools   json.RawMessage `json:"tools"`
	} `json:"input"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// read fills a Request from the body: the last user message, whether a tool
// output follows it, whether this is a title call, and that output.
func readCodexRequest(path string, h http.Header, body []byte) (Request, string) {
	req := Request{Path: path, ThreadID: h.Get("thread-id"), Body: body}
	var b codexBody
	_ = json.Unmarshal(body, &b)
	var toolOut string
	title := strings.Contains(b.Instructions, titlePrompt)
	for _, it := range b.Input {
		switch {
		case it.Type == "message" && it.Role == "user":
			req.UserText, req.ToolOutput, req.Outputs, req.OutputTexts, toolOut = text(it.Content), false, 0, nil, ""
			title = title || strings.Contains(req.UserText, titlePrompt)
		case it.Type == "function_call_output":
			req.ToolOutput = true
			req.Outputs++
			if err := json.Unmarshal(it.Output, &toolOut); err != nil {
				toolOut = string(it.Output)
			}
			req.OutputTexts = append(req.OutputTexts, toolOut)
		case it.Type == "tool_search_output":
			req.ToolOutput = true
			req.Outputs++
			toolOut = string(it.Tools)
		}
	}
	req.Title = title
	return req, toolOut
}

func text(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var parts []contentPart
	_ = json.Unmarshal(content, &parts)
	var out []string
	for _, p := range parts {
		if p.Type == "input_text" || p.Type == "text" {
			out = append(out, p.Text)
		}
	}
	return strings.Join(out, "\n")
}

// sseWriter numbers and flushes Responses events.
type sseWriter struct {
	w   http.ResponseWriter
	seq int
}

func (e *sseWriter) send(typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = e.seq
	e.seq++
	data, _ := json.Marshal(fields)
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", typ, data)
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) handleCodex(w http.ResponseWriter, r *http.Request, body []byte) {
	req, toolOut := readCodexRequest(r.URL.Path, r.Header, body)
	s.mu.Lock()
	s.requests = append(s.requests, req)
	n := len(s.requests)
	hang := s.hang
	s.mu.Unlock()
	if !strings.HasSuffix(r.URL.Path, "/responses") || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}

	id := strconv.Itoa(n)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	e := &sseWriter{w: w}
	e.send("response.created", map[string]any{"response": response("resp_"+id, "in_progress", nil)})

	user := req.UserText
	switch {
	case req.Title:
		s.codexMessage(e, r, "msg_"+id, TitleReply, 1, 0, nil)
	case strings.Contains(user, MarkFail):
		failed := response("resp_"+id, "failed", nil)
		failed["error"] = map[string]any{"code": "server_error", "message": "fake model failure (" + MarkFail + ")"}
		e.send("response.failed", map[string]any{"response": failed})
		return
	case !req.Title && s.scripted(user) != nil && req.Outputs < len(s.scripted(user)) && s.stepReady(s.scripted(user)[req.Outputs], req.OutputTexts):
		st := s.scripted(user)[req.Outputs]
		if st.Before != nil {
			st.Before()
		}
		if st.ArgsFrom != nil {
			st.Args = st.ArgsFrom(req.OutputTexts)
		}
		sendStep(e, id, st)
	case strings.Contains(user, MarkMCP) && !req.ToolOutput:
		call := strings.TrimSpace(user[strings.Index(user, MarkMCP)+len(MarkMCP):])
		call, _, _ = strings.Cut(call, "\n")
		name, args, _ := strings.Cut(call, " ")
		ns, name, _ := strings.Cut(name, "/")
		sendStep(e, id, Step{Namespace: ns, Name: name, Args: strings.TrimSpace(args)})
	case (strings.Contains(user, MarkTool) || strings.Contains(user, MarkRun)) && !req.ToolOutput:
		mark := MarkTool
		if !strings.Contains(user, MarkTool) {
			mark = MarkRun
		}
		cmd := strings.TrimSpace(user[strings.Index(user, mark)+len(mark):])
		cmd, _, _ = strings.Cut(cmd, "\n")
		call := map[string]string{"cmd": cmd}
		if mark == MarkTool {
			call["sandbox_permissions"], call["justification"] = "require_escalated", "the fake model was told to run this"
		}
		args, _ := json.Marshal(call)
		item := map[string]any{"type": "function_call", "id": "fc_" + id, "call_id": "call_" + id,
			"name": "exec_command", "arguments": string(args), "status": "completed"}
		e.send("response.output_item.added", map[string]any{"output_index": 0, "item": item})
		e.send("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	case req.ToolOutput:
		s.codexMessage(e, r, "msg_"+id, "TOOL OUTPUT: "+clip(toolOut, 300), 3, 0, nil)
	case strings.Contains(user, MarkHang):
		if !s.codexMessage(e, r, "msg_"+id, "ECHO: "+clip(user, 200), 3, 0, hang) {
			return
		}
	case strings.Contains(user, MarkSlow):
		if !s.codexMessage(e, r, "msg_"+id, "ECHO: "+clip(user, 200), SlowDeltas, SlowStep, nil) {
			return
		}
	default:
		s.codexMessage(e, r, "msg_"+id, "ECHO: "+clip(user, 200), 3, 0, nil)
	}
	e.send("response.completed", map[string]any{"response": response("resp_"+id, "completed", map[string]any{
		"input_tokens": 10, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": 5, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": 15,
	})})
}

// sendStep streams one scripted action as the output item Codex
// executes: a client-side tool_search, or a namespaced function call.
func sendStep(e *sseWriter, id string, st Step) {
	var item map[string]any
	if st.Query != "" {
		item = map[string]any{"type": "tool_search_call", "id": "ts_" + id, "call_id": "call_" + id, "status": "completed",
			"execution": "client", "arguments": map[string]any{"query": st.Query}}
	} else {
		args := st.Args
		if args == "" {
			args = "{}"
		}
		item = map[string]any{"type": "function_call", "id": "fc_" + id, "call_id": "call_" + id, "name": st.Name,
			"arguments": args, "status": "completed"}
		if st.Namespace != "" {
			item["namespace"] = st.Namespace // an MCP tool; none: one of Codex's own, such as exec_command
		}
	}
	e.send("response.output_item.added", map[string]any{"output_index": 0, "item": item})
	e.send("response.output_item.done", map[string]any{"output_index": 0, "item": item})
}

// codexMessage streams one assistant message item in the order the real API
// does (Codex drops text deltas that arrive outside an added item). With
// hang, it stops after the first delta until hang closes; with step, it
// sleeps between deltas. It reports false when the client went away.
func (s *Server) codexMessage(e *sseWriter, r *http.Request, id, reply string, deltas int, step time.Duration, hang <-chan struct{}) bool {
	idx := map[string]any{"item_id": id, "output_index": 0, "content_index": 0}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range idx {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	item := func(status string, content []any) map[string]any {
		return map[string]any{"type": "message", "id": id, "role": "assistant", "status": status, "content": content}
	}
	part := func(t string) map[string]any {
		return map[string]any{"type": "output_text", "text": t, "annotations": []any{}}
	}
	e.send("response.output_item.added", map[string]any{"output_index": 0, "item": item("in_progress", []any{})})
	e.send("response.content_part.added", with("part", part("")))
	for i, piece := range split(reply, deltas) {
		if i > 0 && step > 0 {
			select {
			case <-time.After(step):
			case <-r.Context().Done():
				return false
			}
		}
		e.send("response.output_text.delta", with("delta", piece))
		if i == 0 && hang != nil {
			select {
			case <-hang:
			case <-r.Context().Done():
				return false
			case <-time.After(HangLimit):
				return false
			}
		}
	}
	e.send("response.output_text.done", with("text", reply))
	e.send("response.content_part.done", with("part", part(reply)))
	e.send("response.output_item.done", map[string]any{"output_index": 0, "item": item("completed", []any{part(reply)})})
	return true
}

func response(id, status string, usage map[string]any) map[string]any {
	m := map[string]any{"id": id, "object": "response", "created_at": 1, "status": status, "model": "fake", "output": []any{}}
	if usage != nil {
		m["usage"] = usage
	}
	return m
}

// split cuts s into at most n pieces of about equal length, on rune
// boundaries.
func split(s string, n int) []string {
	rs := []rune(s)
	if n < 1 || len(rs) == 0 {
		return []string{s}
	}
	step := (len(rs) + n - 1) / n
	var out []string
	for i := 0; i < len(rs); i += step {
		out = append(out, string(rs[i:min(i+step, len(rs))]))
	}
	return out
}

func clip(s string, n int) string {
	rs := []rune(s)
	if len(rs) > n {
		return string(rs[len(rs)-n:])
	}
	return s
}
