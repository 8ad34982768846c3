package driver

import (
	"context"
	"net/http"

	"github.com/cbth-dev/cbth/engine/errs"
)

// Creds hands a driver the credential of a provider.
type Creds interface {
	APIKey(ctx context.Context, provider, envOverride string) (string, error)
}

// Deps are what a network driver needs from its host.
type Deps struct {
	Creds Creds
	// HTTP is the client used for provider calls; nil means the SDK default.
	HTTP *http.Client
}

// Key resolves the credential for req, honouring a .d/default api_key_env.
func (d Deps) Key(ctx context.Context, req Request) (string, error) {
	if d.Creds == nil {
		return "", errs.New(errs.ENOTCONF, "provider %s is not configured: no credential source", req.Provider)
	}
	override, _ := req.Default("api_key_env")
	return d.Creds.APIKey(ctx, req.Provider, override)
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
