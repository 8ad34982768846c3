package driver

import (
	"context"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Creds hands a driver the credential of a provider.
type Creds interface {
	APIKey(ctx context.Context, provider, envOverride string) (string, error)
}

// BaseURL returns the base URL for req. Providers other than native ones
// have no SDK default, so they must declare base_url.
func BaseURL(req Request, native string, p Params) (string, error) {
	if p.BaseURL != "" {
		return p.BaseURL, nil
	}
	if req.Provider != native {
		return "", errs.New(errs.ENOTCONF, "model %s has no base_url default", req.Model)
	}
	return "", nil
}
