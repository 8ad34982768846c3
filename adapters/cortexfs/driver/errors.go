package driver

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/cbth-dev/cbth/internal/errs"
)

// CodeForStatus maps a provider HTTP status to a stable code.
func CodeForStatus(status int) errs.Code {
	switch {
	case status == 401 || status == 403:
		return errs.EACCES
	case status == 429:
		return errs.EAGAIN
	case status == 404:
		return errs.ENOENT
	case status == 413:
		return errs.EMSGSIZE
	case status >= 400 && status < 500:
		return errs.EINVAL
	case status >= 500:
		return errs.EHOSTDOWN
	default:
		return errs.EINTERNAL
	}
}

// CodeForErrorType maps a provider error type word, as found in streamed
// error payloads, to a stable code. Unknown types mean the provider failed.
func CodeForErrorType(t string) errs.Code {
	t = strings.ToLower(t)
	switch {
	case strings.Contains(t, "auth") || strings.Contains(t, "permission") || strings.Contains(t, "unauthenticated"):
		return errs.EACCES
	case strings.Contains(t, "rate") || strings.Contains(t, "overloaded") || strings.Contains(t, "resource_exhausted") || strings.Contains(t, "quota"):
		return errs.EAGAIN
	case strings.Contains(t, "invalid") || strings.Contains(t, "bad_request"):
		return errs.EINVAL
	case strings.Contains(t, "not_found"):
		return errs.ENOENT
	default:
		return errs.EHOSTDOWN
	}
}

// IsTransport reports whether err is a failure to reach the provider at all:
// a refused or reset connection, an unreachable host, or any error of
// package net or of an HTTP client on top of it (*url.Error).
func IsTransport(err error) bool {
	var ne net.Error
	var ue *url.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.As(err, &ne) || errors.As(err, &ue)
}

// Fail builds the error a driver returns. The public message names the
// provider, the code and a cleaned provider detail; the secret, if given,
// is scrubbed from it. The cause is not attached: SDK errors may quote
// request headers or URLs, and only the message reaches output.
func Fail(provider string, code errs.Code, detail, secret string) error {
	detail = Scrub(detail, secret)
	if len(detail) > 300 {
		detail = detail[:300] + "..."
	}
	if detail == "" {
		return errs.New(code, "%s: %s", provider, describe(code))
	}
	return errs.New(code, "%s: %s: %s", provider, describe(code), detail)
}

// Scrub removes secret from s.
func Scrub(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[redacted]")
}

func describe(c errs.Code) string {
	switch c {
	case errs.EACCES:
		return "permission denied"
	case errs.EAGAIN:
		return "rate limited, try again later"
	case errs.EINVAL:
		return "request rejected"
	case errs.EHOSTDOWN:
		return "provider unreachable"
	case errs.ENOENT:
		return "model not found"
	default:
		return "provider error"
	}
}

// Canceled reports whether the run ended because ctx was cancelled.
func Canceled(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || IsTransport(err))
}

// Transport maps an unreachable-provider error.
func Transport(provider string, err error, secret string) error {
	_ = err // detail left out: dial errors quote addresses, not useful to clients
	return Fail(provider, errs.EHOSTDOWN, "connection failed", secret)
}
