package desktop

import (
	"time"

	"github.com/cbth-dev/cbth/engine"
	"github.com/cbth-dev/cbth/engine/command"
	"github.com/cbth-dev/cbth/events"
	"github.com/cbth-dev/cbth/internal/errs"
)

// MaxMCPValidationTTL bounds how long a live validation of the mcp
// writeback transport stays open.
const MaxMCPValidationTTL = 24 * time.Hour

// RequestMCPValidation opens a live validation of the mcp writeback
// transport (`cbth desktop validate-mcp`): a Desktop thread's call of
// desktop_validate_mcp must bring Token back within TTL. A new request
// replaces an open one.
type RequestMCPValidation struct {
	engine.Answers[events.InstallationMCPValidationRequested]

	Token string
	TTL   time.Duration
}

// Decide implements engine.Decider. The Value is the request.
func (c RequestMCPValidation) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if len(c.Token) < 16 || len(c.Token) > 128 {
		return engine.Decision{}, errs.New(errs.EINVAL, "a validation token is 16 to 128 bytes")
	}
	if c.TTL <= 0 || c.TTL > MaxMCPValidationTTL {
		return engine.Decision{}, errs.New(errs.EINVAL, "the validation's time to live must be positive and at most %s", MaxMCPValidationTTL)
	}
	inst, err := command.Installation(v)
	if err != nil {
		return engine.Decision{}, err
	}
	if inst == nil {
		return engine.Decision{}, errs.New(errs.ENOTCONF, "no Desktop installation state: repair it first (cbth desktop installation-state repair)")
	}
	req := &events.InstallationMCPValidationRequested{Token: c.Token, ExpiresAt: now.Add(c.TTL)}
	return c.Answer(engine.Decision{Outcome: command.OutcomeRequested, Emits: []engine.Emit{{Stream: installationStream(), Payload: req}}}, *req), nil
}

// ValidateMCPWriteback records the proof of a desktop_validate_mcp call:
// the open request's token, before it expired, from the thread Codex
// named. The same token again, once validated, is already_validated and
// appends nothing.
type ValidateMCPWriteback struct {
	engine.Answers[events.InstallationMCPWritebackValidated]

	Token       string
	ThreadID    string
	SandboxMode string
	// Fingerprint is the validation fingerprint the answering cbth
	// observes for the installation's read transport.
	Fingerprint string
}

// Decide implements engine.Decider. The Value is the proof.
func (c ValidateMCPWriteback) Decide(v engine.View, now time.Time) (engine.Decision, error) {
	if c.ThreadID == "" || c.Token == "" {
		return engine.Decision{}, errs.New(errs.EINVAL, "a validation needs its token and the calling thread")
	}
	inst, err := command.Installation(v)
	if err != nil {
		return engine.Decision{}, err
	}
	if inst == nil {
		return engine.Decision{}, errs.New(errs.ENOTCONF, "no Desktop installation state")
	}
	if w := inst.MCPWriteback; w != nil && w.Token == c.Token && inst.MCPValidation == nil {
		return c.Answer(engine.Decision{Outcome: command.OutcomeAlreadyValidated}, w.InstallationMCPWritebackValidated), nil
	}
	req := inst.MCPValidation
	switch {
	case req == nil || req.Token != c.Token:
		return engine.Decision{}, errs.New(errs.ESTALE, "the token is not the one of the open validation (run cbth desktop validate-mcp again)")
	case !now.Before(req.ExpiresAt):
		return engine.Decision{}, errs.New(errs.ESTALE, "the validation expired at %s (run cbth desktop validate-mcp again)", req.ExpiresAt.Format(time.RFC3339))
	}
	proof := &events.InstallationMCPWritebackValidated{ThreadID: c.ThreadID, SandboxMode: c.SandboxMode, Fingerprint: c.Fingerprint, Token: c.Token}
	return c.Answer(engine.Decision{Outcome: command.OutcomeValidated, Emits: []engine.Emit{{Stream: installationStream(), Payload: proof}}}, *proof), nil
}
