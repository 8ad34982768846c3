// Package openai holds the drivers that speak OpenAI's APIs through the
// official SDK: chat completions (openai-chat, also for compatible hosts)
// and the Responses API (openai-responses).
package openai

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
)

// Driver names.
const (
	ChatName      = "openai-chat"
	ResponsesName = "openai-responses"
)

func client(ctx context.Context, deps sdkdeps.Deps, req driver.Request) (sdk.Client, driver.Params, string, error) {
	p, err := driver.ParamsOf(req)
	if err != nil {
		return sdk.Client{}, p, "", err
	}
	base, err := driver.BaseURL(req, "openai", p)
	if err != nil {
		return sdk.Client{}, p, "", err
	}
	key, err := deps.Key(ctx, req)
	if err != nil {
		return sdk.Client{}, p, "", err
	}
	// Retries are off: a 429 must reach the caller as EAGAIN now, not
	// after a hidden back-off.
	opts := []option.RequestOption{option.WithAPIKey(key), option.WithMaxRetries(0)}
	if base != "" {
		opts = append(opts, option.WithBaseURL(base))
	}
	if deps.HTTP != nil {
		opts = append(opts, option.WithHTTPClient(deps.HTTP))
	}
	return sdk.NewClient(opts...), p, key, nil
}

// mapErr turns an SDK error into a coded error without the secret.
func mapErr(ctx context.Context, provider string, err error, key string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		return driver.Fail(provider, driver.CodeForStatus(apiErr.StatusCode), apiErr.Message, key)
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		e := gjson.GetBytes(se.Event.Data, "error")
		typ := e.Get("type").String()
		if typ == "" {
			typ = e.Get("code").String()
		}
		return driver.Fail(provider, driver.CodeForErrorType(typ), e.Get("message").String(), key)
	}
	if driver.IsTransport(err) {
		return driver.Transport(provider, err, key)
	}
	return driver.Fail(provider, errs.EHOSTDOWN, "unreadable response stream", key)
}

// Chat is the chat completions driver.
type Chat struct{ Deps sdkdeps.Deps }

// Drivers are this package's drivers, wired to deps: the set of the
// OpenAI helper (cbth-providers-openai).
func Drivers(deps sdkdeps.Deps) driver.Set {
	return driver.Set{ChatName: Chat{Deps: deps}, ResponsesName: Responses{Deps: deps}}
}

type pendingCall struct{ id, name, args string }

// Stream implements driver.Driver.
func (c Chat) Stream(ctx context.Context, req driver.Request, out stream.Sink) error {
	if err := driver.ValidateMessages(req.Messages); err != nil {
		return err
	}
	cl, p, key, err := client(ctx, c.Deps, req)
	if err != nil {
		return err
	}
	params := sdk.ChatCompletionNewParams{
		Model:         sdk.ChatModel(req.NativeID),
		StreamOptions: sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)},
	}
	names, err := driver.NewToolNames(req.Tools)
	if err != nil {
		return err
	}
	for _, t := range req.Tools {
		sch, err := t.Schema()
		if err != nil {
			return err
		}
		fn := shared.FunctionDefinitionParam{Name: names.Wire(t.Name), Parameters: shared.FunctionParameters(sch)}
		if t.Description != "" {
			fn.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(fn))
	}
	for _, m := range req.Messages {
		switch m.Role {
		case driver.RoleSystem:
			params.Messages = append(params.Messages, sdk.SystemMessage(m.Content))
		case driver.RoleAssistant:
			if len(m.ToolCalls) == 0 {
				params.Messages = append(params.Messages, sdk.AssistantMessage(m.Content))
				continue
			}
			var a sdk.ChatCompletionAssistantMessageParam
			if m.Content != "" {
				a.Content.OfString = sdk.String(m.Content)
			}
			for _, c := range m.ToolCalls {
				args := string(c.Arguments)
				if args == "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, sdk.ChatCompletionMessageToolCallUnionParam{OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
					ID: c.ID, Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: names.Wire(c.Name), Arguments: args}}})
			}
			params.Messages = append(params.Messages, sdk.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case driver.RoleTool:
			params.Messages = append(params.Messages, sdk.ToolMessage(m.Content, m.CallID))
		default:
			params.Messages = append(params.Messages, sdk.UserMessage(m.Content))
		}
	}
	if p.Temperature != nil {
		params.Temperature = sdk.Float(*p.Temperature)
	}
	if p.TopP != nil {
		params.TopP = sdk.Float(*p.TopP)
	}
	if p.MaxTokens != nil {
		params.MaxCompletionTokens = sdk.Int(*p.MaxTokens)
	}

	st := cl.Chat.Completions.NewStreaming(ctx, params)
	defer st.Close()
	var text, reasoning strings.Builder
	calls := map[int64]*pendingCall{}
	var usage *sdk.CompletionUsage
	for st.Next() {
		chunk := st.Current()
		if chunk.Usage.TotalTokens > 0 || chunk.Usage.PromptTokens > 0 {
			u := chunk.Usage
			usage = &u
		}
		for _, choice := range chunk.Choices {
			d := choice.Delta
			// Compatible hosts stream reasoning as a non-standard field.
			if f, ok := d.JSON.ExtraFields["reasoning_content"]; ok {
				if r := gjson.Parse(f.Raw()).String(); r != "" {
					reasoning.WriteString(r)
					if err := out.Emit(stream.ReasoningDelta(r)); err != nil {
						return err
					}
				}
			}
			if d.Content != "" {
				text.WriteString(d.Content)
				if err := out.Emit(stream.Delta(d.Content)); err != nil {
					return err
				}
			}
			for _, tc := range d.ToolCalls {
				pc := calls[tc.Index]
				if pc == nil {
					pc = &pendingCall{}
					calls[tc.Index] = pc
				}
				if tc.ID != "" {
					pc.id = tc.ID
				}
				if tc.Function.Name != "" {
					pc.name = tc.Function.Name
				}
				pc.args += tc.Function.Arguments
			}
		}
	}
	if err := st.Err(); err != nil {
		return mapErr(ctx, req.Provider, err, key)
	}
	end := driver.Ending{Reasoning: reasoning.String(), Text: text.String()}
	idx := make([]int64, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for _, i := range idx {
		pc := calls[i]
		end.Calls = append(end.Calls, stream.ToolCall(pc.id, names.Canonical(pc.name), pc.args))
	}
	if usage != nil {
		end.Usage, end.In, end.Out = true, usage.PromptTokens, usage.CompletionTokens
	}
	return end.Emit(out)
}
