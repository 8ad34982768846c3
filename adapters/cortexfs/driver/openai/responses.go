package openai

import (
	"context"
	"strings"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// Responses is the Responses API driver. It is stateless toward the
// provider: every call sends the whole conversation (store=false).
type Responses struct{ Deps sdkdeps.Deps }

// Stream implements driver.Driver.
// The Responses stream's event types this driver reads.
const (
	evTextDelta             = "response.output_text.delta"
	evReasoningSummaryDelta = "response.reasoning_summary_text.delta"
	evReasoningDelta        = "response.reasoning_text.delta"
	evItemDone              = "response.output_item.done"
	evCompleted             = "response.completed"
	evIncomplete            = "response.incomplete"
	evFailed                = "response.failed"
	evError                 = "error" // a stream-level error, outside any response
)

func (r Responses) Stream(ctx context.Context, req driver.Request, out stream.Sink) error {
	if err := driver.ValidateMessages(req.Messages); err != nil {
		return err
	}
	cl, p, key, err := client(ctx, r.Deps, req)
	if err != nil {
		return err
	}
	params := responses.ResponseNewParams{Model: shared.ResponsesModel(req.NativeID), Store: sdk.Bool(false)}
	var system []string
	var items responses.ResponseInputParam
	names, err := driver.NewToolNames(req.Tools)
	if err != nil {
		return err
	}
	for _, t := range req.Tools {
		sch, err := t.Schema()
		if err != nil {
			return err
		}
		// Not strict: strict mode needs every property required, and
		// the built-in tools have optional ones.
		fn := responses.FunctionToolParam{Name: names.Wire(t.Name), Parameters: sch, Strict: sdk.Bool(false)}
		if t.Description != "" {
			fn.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, responses.ToolUnionParam{OfFunction: &fn})
	}
	for _, m := range req.Messages {
		switch m.Role {
		case driver.RoleSystem:
			system = append(system, m.Content)
		case driver.RoleAssistant:
			if m.Content != "" || len(m.ToolCalls) == 0 {
				items = append(items, responses.ResponseInputItemParamOfMessage(m.Content, responses.EasyInputMessageRoleAssistant))
			}
			for _, c := range m.ToolCalls {
				args := string(c.Arguments)
				if args == "" {
					args = "{}"
				}
				items = append(items, responses.ResponseInputItemParamOfFunctionCall(args, c.ID, names.Wire(c.Name)))
			}
		case driver.RoleTool:
			out := responses.ResponseInputItemParamOfFunctionCallOutput(m.Content)
			out.OfFunctionCallOutput.CallID = sdk.String(m.CallID)
			items = append(items, out)
		default:
			items = append(items, responses.ResponseInputItemParamOfMessage(m.Content, responses.EasyInputMessageRoleUser))
		}
	}
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: items}
	if len(system) > 0 {
		params.Instructions = sdk.String(strings.Join(system, "\n\n"))
	}
	if p.Temperature != nil {
		params.Temperature = sdk.Float(*p.Temperature)
	}
	if p.TopP != nil {
		params.TopP = sdk.Float(*p.TopP)
	}
	if p.MaxTokens != nil {
		params.MaxOutputTokens = sdk.Int(*p.MaxTokens)
	}

	st := cl.Responses.NewStreaming(ctx, params)
	defer st.Close()
	var text, reasoning strings.Builder
	var usage *responses.ResponseUsage
	ncalls := 0
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case evTextDelta:
			text.WriteString(ev.Delta)
			if err := out.Emit(stream.Delta(ev.Delta)); err != nil {
				return err
			}
		case evReasoningSummaryDelta, evReasoningDelta:
			reasoning.WriteString(ev.Delta)
			if err := out.Emit(stream.ReasoningDelta(ev.Delta)); err != nil {
				return err
			}
		case evItemDone:
			if ev.Item.Type == "function_call" {
				fc := ev.Item.AsFunctionCall()
				ncalls++
				if err := out.Emit(stream.ToolCall(fc.CallID, names.Canonical(fc.Name), fc.Arguments)); err != nil {
					return err
				}
			}
		case evCompleted, evIncomplete:
			u := ev.Response.Usage
			usage = &u
		case evFailed:
			e := ev.Response.Error
			return driver.Fail(req.Provider, driver.CodeForErrorType(string(e.Code)), e.Message, key)
		case evError:
			return driver.Fail(req.Provider, driver.CodeForErrorType(ev.Code), ev.Message, key)
		}
	}
	if err := st.Err(); err != nil {
		return mapErr(ctx, req.Provider, err, key)
	}
	end := driver.Ending{Reasoning: reasoning.String(), Called: ncalls > 0, Text: text.String()}
	if usage != nil {
		end.Usage, end.In, end.Out = true, usage.InputTokens, usage.OutputTokens
	}
	return end.Emit(out)
}
