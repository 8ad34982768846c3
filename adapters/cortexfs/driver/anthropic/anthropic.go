// Package anthropic is the anthropic-messages driver on the official SDK.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/tidwall/gjson"
)

// Name is the driver name in .d/driver.
const Name = "anthropic-messages"

// DefaultMaxTokens is sent when .d/default has no max_tokens: the Messages
// API requires one.
const DefaultMaxTokens = 4096

// Messages is the driver.
type Messages struct{ Deps sdkdeps.Deps }

// Drivers are this package's drivers, wired to deps: the set of the
// Anthropic helper (cbth-providers-anthropic).
func Drivers(deps sdkdeps.Deps) driver.Set { return driver.Set{Name: Messages{Deps: deps}} }

type toolUse struct {
	id, name string
	args     strings.Builder
}

// Stream implements driver.Driver.
func (m Messages) Stream(ctx context.Context, req driver.Request, out stream.Sink) error {
	if err := driver.ValidateMessages(req.Messages); err != nil {
		return err
	}
	p, err := driver.ParamsOf(req)
	if err != nil {
		return err
	}
	base, err := driver.BaseURL(req, "anthropic", p)
	if err != nil {
		return err
	}
	key, err := m.Deps.Key(ctx, req)
	if err != nil {
		return err
	}
	opts := []option.RequestOption{option.WithAPIKey(key), option.WithMaxRetries(0)}
	if base != "" {
		opts = append(opts, option.WithBaseURL(base))
	}
	if m.Deps.HTTP != nil {
		opts = append(opts, option.WithHTTPClient(m.Deps.HTTP))
	}
	cl := sdk.NewClient(opts...)

	params := sdk.MessageNewParams{Model: sdk.Model(req.NativeID), MaxTokens: DefaultMaxTokens}
	if p.MaxTokens != nil {
		params.MaxTokens = *p.MaxTokens
	}
	if p.Temperature != nil {
		params.Temperature = sdk.Float(*p.Temperature)
	}
	if p.TopP != nil {
		params.TopP = sdk.Float(*p.TopP)
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
		in := sdk.ToolInputSchemaParam{Properties: sch["properties"], ExtraFields: map[string]any{}}
		for k, v := range sch {
			switch k {
			case "type", "properties":
			case "required":
				rb, _ := json.Marshal(v)
				_ = json.Unmarshal(rb, &in.Required)
			default:
				in.ExtraFields[k] = v
			}
		}
		tp := sdk.ToolParam{Name: names.Wire(t.Name), InputSchema: in}
		if t.Description != "" {
			tp.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ToolUnionParam{OfTool: &tp})
	}
	for i, msg := range req.Messages {
		switch msg.Role {
		case driver.RoleSystem:
			params.System = append(params.System, sdk.TextBlockParam{Text: msg.Content})
		case driver.RoleAssistant:
			var blocks []sdk.ContentBlockParamUnion
			if msg.Content != "" || len(msg.ToolCalls) == 0 {
				blocks = append(blocks, sdk.NewTextBlock(msg.Content))
			}
			for _, c := range msg.ToolCalls {
				blocks = append(blocks, sdk.NewToolUseBlock(c.ID, driver.ArgsObject(c.Arguments), names.Wire(c.Name)))
			}
			params.Messages = append(params.Messages, sdk.NewAssistantMessage(blocks...))
		case driver.RoleTool:
			// The results of one assistant turn's calls go back together
			// in the one user message that follows it.
			block := sdk.NewToolResultBlock(msg.CallID, msg.Content, false)
			if n := len(params.Messages); i > 0 && req.Messages[i-1].Role == driver.RoleTool && n > 0 {
				params.Messages[n-1].Content = append(params.Messages[n-1].Content, block)
				continue
			}
			params.Messages = append(params.Messages, sdk.NewUserMessage(block))
		default:
			params.Messages = append(params.Messages, sdk.NewUserMessage(sdk.NewTextBlock(msg.Content)))
		}
	}

	st := cl.Messages.NewStreaming(ctx, params)
	defer st.Close()
	var text, thinking strings.Builder
	var inTok, outTok int64
	sawUsage := false
	tools := map[int64]*toolUse{}
	ncalls := 0
	for st.Next() {
		switch e := st.Current().AsAny().(type) {
		case sdk.MessageStartEvent:
			inTok, outTok, sawUsage = e.Message.Usage.InputTokens, e.Message.Usage.OutputTokens, true
		case sdk.ContentBlockStartEvent:
			if e.ContentBlock.Type == "tool_use" {
				tools[e.Index] = &toolUse{id: e.ContentBlock.ID, name: e.ContentBlock.Name}
			}
		case sdk.ContentBlockDeltaEvent:
			switch d := e.Delta.AsAny().(type) {
			case sdk.TextDelta:
				text.WriteString(d.Text)
				if err := out.Emit(stream.Delta(d.Text)); err != nil {
					return err
				}
			case sdk.ThinkingDelta:
				thinking.WriteString(d.Thinking)
				if err := out.Emit(stream.ReasoningDelta(d.Thinking)); err != nil {
					return err
				}
			case sdk.InputJSONDelta:
				if tu := tools[e.Index]; tu != nil {
					tu.args.WriteString(d.PartialJSON)
				}
			}
		case sdk.ContentBlockStopEvent:
			if tu := tools[e.Index]; tu != nil {
				delete(tools, e.Index)
				ncalls++
				if err := out.Emit(stream.ToolCall(tu.id, names.Canonical(tu.name), tu.args.String())); err != nil {
					return err
				}
			}
		case sdk.MessageDeltaEvent:
			outTok, sawUsage = e.Usage.OutputTokens, true
			if e.Usage.InputTokens > 0 {
				inTok = e.Usage.InputTokens
			}
		}
	}
	if err := st.Err(); err != nil {
		return mapErr(ctx, req.Provider, err, key)
	}
	end := driver.Ending{Reasoning: thinking.String(), Called: ncalls > 0, Text: text.String(), Usage: sawUsage, In: inTok, Out: outTok}
	return end.Emit(out)
}

func mapErr(ctx context.Context, provider string, err error, key string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		body := gjson.Parse(apiErr.RawJSON()).Get("error")
		code := driver.CodeForStatus(apiErr.StatusCode)
		// An error event inside a 200 stream carries only its type.
		if apiErr.StatusCode < 400 {
			code = driver.CodeForErrorType(body.Get("type").String())
		}
		return driver.Fail(provider, code, body.Get("message").String(), key)
	}
	if driver.IsTransport(err) {
		return driver.Transport(provider, err, key)
	}
	return driver.Fail(provider, errs.EHOSTDOWN, "unreadable response stream", key)
}
