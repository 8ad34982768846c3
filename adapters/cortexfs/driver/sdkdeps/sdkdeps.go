// Package sdkdeps holds what the SDK-backed network drivers need from their
// host: a credential source and an HTTP client. It lives apart from package
// driver so that the core binary, which only knows the driver interface,
// does not link net/http through it.
package sdkdeps

import (
	"context"
	"net/http"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver"
	"github.com/cbth-dev/cbth/internal/errs"
)

// Deps are what a network driver needs from its host.
type Deps struct {
	Creds driver.Creds
	// HTTP is the client used for provider calls; nil means the SDK default.
	HTTP *http.Client
}

// Key resolves the credential for req, honouring a .d/default api_key_env.
func (d Deps) Key(ctx context.Context, req driver.Request) (string, error) {
	if d.Creds == nil {
		return "", errs.New(errs.ENOTCONF, "provider %s is not configured: no credential source", req.Provider)
	}
	override, _ := req.Default("api_key_env")
	return d.Creds.APIKey(ctx, req.Provider, override)
}
