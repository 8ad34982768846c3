// Package gemini is the Gemini driver on the official google.golang.org/genai
// SDK (Gemini API backend, streamGenerateContent over SSE).
package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/sdkdeps"
	"github.com/cbth-dev/cbth/adapters/cortexfs/stream"
	"github.com/cbth-dev/cbth/internal/errs"
	"google.golang.org/genai"
)

// Name is the driver name in .d/driver.
const Name = "gemini"

// Gemini is the driver.
type Gemini struct{ Deps sdkdeps.Deps }

// Drivers are this package's drivers, wired to deps: the set of the
// Gemini helper (cbth-providers-gemini).
func Drivers(deps sdkdeps.Deps) driver.Set { return driver.Set{Name: Gemini{Deps: deps}} }

// Stream implements driver.Driver.
func (g Gemini) Stream(ctx context.Context, req driver.Request, out stream.Sink) error {
	if err := driver.ValidateMessages(req.Messages); err != nil {
		return err
	}
	p, err := driver.ParamsOf(req)
	if err != nil {
		return err
	}
	base := p.BaseURL
	if base == "" && req.Provider != "google" && req.Provider != "gemini" {
		return errs.New(errs.ENOTCONF, "model %s has no base_url default", req.Model)
	}
	key, err := g.Deps.Key(ctx, req)
	if err != nil {
		return err
	}
	cfg := &genai.ClientConfig{APIKey: key, Backend: genai.BackendGeminiAPI, HTTPClient: g.Deps.HTTP,
		HTTPOptions: genai.HTTPOptions{BaseURL: base}}
	cl, err := genai.NewClient(ctx, cfg)
	if err != nil {
		return driver.Fail(req.Provider, errs.ENOTCONF, "client setup failed", key)
	}
	gc := &genai.GenerateContentConfig{}
	if p.Temperature != nil {
		t := float32(*p.Temperature)
		gc.Temperature = &t
	}
	if p.TopP != nil {
		t := float32(*p.TopP)
		gc.TopP = &t
	}
	if p.MaxTokens != nil {
		gc.MaxOutputTokens = int32(*p.MaxTokens)
	}
	names, err := driver.NewToolNames(req.Tools)
	if err != nil {
		return err
	}
	if len(req.Tools) > 0 {
		decls := make([]*genai.FunctionDeclaration, 0, len(req.Tools))
		for _, t := range req.Tools {
			sch, err := t.Schema()
			if err != nil {
				return err
			}
			decls = append(decls, &genai.FunctionDeclaration{Name: names.Wire(t.Name), Description: t.Description, ParametersJsonSchema: sch})
		}
		gc.Tools = []*genai.Tool{{FunctionDeclarations: decls}}
	}
	var contents []*genai.Content
	for i, m := range req.Messages {
		part := &genai.Part{Text: m.Content}
		switch m.Role {
		case driver.RoleSystem:
			if gc.SystemInstruction == nil {
				gc.SystemInstruction = &genai.Content{}
			}
			gc.SystemInstruction.Parts = append(gc.SystemInstruction.Parts, part)
		case driver.RoleAssistant:
			var parts []*genai.Part
			if m.Content != "" || len(m.ToolCalls) == 0 {
				parts = append(parts, part)
			}
			for _, c := range m.ToolCalls {
				parts = append(parts, &genai.Part{FunctionCall: &genai.FunctionCall{ID: c.ID, Name: names.Wire(c.Name), Args: driver.ArgsObject(c.Arguments)}})
			}
			contents = append(contents, &genai.Content{Role: genai.RoleModel, Parts: parts})
		case driver.RoleTool:
			// Gemini pairs results with calls by name (and id when the
			// call had one); one turn's results share one user content.
			fr := &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: m.CallID, Name: names.Wire(m.Name),
				Response: map[string]any{"output": m.Content}}}
			if n := len(contents); i > 0 && req.Messages[i-1].Role == driver.RoleTool && n > 0 {
				contents[n-1].Parts = append(contents[n-1].Parts, fr)
				continue
			}
			contents = append(contents, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{fr}})
		default:
			contents = append(contents, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{part}})
		}
	}

	var text, thought strings.Builder
	var usage *genai.GenerateContentResponseUsageMetadata
	ncalls := 0
	for resp, err := range cl.Models.GenerateContentStream(ctx, req.NativeID, contents, gc) {
		if err != nil {
			return mapErr(ctx, req.Provider, err, key)
		}
		if resp.UsageMetadata != nil {
			usage = resp.UsageMetadata
		}
		for _, cand := range resp.Candidates {
			if cand.Content == nil {
				continue
			}
			for _, part := range cand.Content.Parts {
				var e stream.Event
				switch {
				case part.FunctionCall != nil:
					args, _ := json.Marshal(part.FunctionCall.Args)
					e = stream.ToolCall(part.FunctionCall.ID, names.Canonical(part.FunctionCall.Name), string(args))
					ncalls++
				case part.Thought && part.Text != "":
					thought.WriteString(part.Text)
					e = stream.ReasoningDelta(part.Text)
				case part.Text != "":
					text.WriteString(part.Text)
					e = stream.Delta(part.Text)
				default:
					continue
				}
				if err := out.Emit(e); err != nil {
					return err
				}
			}
		}
	}
	end := driver.Ending{Reasoning: thought.String(), Called: ncalls > 0, Text: text.String()}
	if usage != nil {
		end.Usage, end.In, end.Out = true, int64(usage.PromptTokenCount), int64(usage.CandidatesTokenCount)
	}
	return end.Emit(out)
}

func mapErr(ctx context.Context, provider string, err error, key string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var apiErr genai.APIError
	var apiErrP *genai.APIError
	switch {
	case errors.As(err, &apiErr):
	case errors.As(err, &apiErrP):
		apiErr = *apiErrP
	default:
		if driver.IsTransport(err) {
			return driver.Transport(provider, err, key)
		}
		return driver.Fail(provider, errs.EHOSTDOWN, "unreadable response stream", key)
	}
	code := driver.CodeForStatus(apiErr.Code)
	if apiErr.Code == 0 {
		code = driver.CodeForErrorType(apiErr.Status)
	}
	return driver.Fail(provider, code, apiErr.Message, key)
}
