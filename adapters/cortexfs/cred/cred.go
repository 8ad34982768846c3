// Package cred finds provider credentials: the environment first, then the
// system keychain (service cortexfs:<provider>, account default), else the
// provider is not configured. A credential is only ever returned to the
// driver that sends it; it is never written anywhere.
package cred

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/cbth-dev/cbth/adapters/cortexfs/cred/credenv"
	"github.com/cbth-dev/cbth/internal/errs"
	"github.com/zalando/go-keyring"
)

// Account is the keychain account every provider item uses.
const Account = "default"

// DefaultKeychainTimeout bounds a keychain look-up. On a box without a
// secret service the look-up must come back as "not configured", not hang.
const DefaultKeychainTimeout = 2 * time.Second

// Keychain reads one secret.
type Keychain interface {
	Get(service, account string) (string, error)
}

// ErrNotFound is what a Keychain returns for a missing item.
var ErrNotFound = errors.New("keychain item not found")

// System is the OS keychain through go-keyring.
type System struct{}

// Get reads the item; every failure, a missing bus included, reads as
// not found, because to the caller both mean "no credential there".
func (System) Get(service, account string) (string, error) {
	s, err := keyring.Get(service, account)
	if err != nil {
		return "", errors.Join(ErrNotFound, err)
	}
	return s, nil
}

// Source resolves credentials. Its zero value reads nothing: callers pass
// the environment and keychain they mean.
type Source struct {
	LookupEnv func(string) (string, bool)
	Keychain  Keychain
	Timeout   time.Duration
}

// Service is the keychain service name of a provider.
func Service(provider string) string { return "cortexfs:" + provider }

// EnvNames lists the variables tried for provider, first match wins
// (credenv.EnvNames).
func EnvNames(provider, override string) []string { return credenv.EnvNames(provider, override) }

// EnvName is <PROVIDER>_API_KEY (credenv.EnvName).
func EnvName(provider string) string { return credenv.EnvName(provider) }

// APIKey returns the credential for provider or an ENOTCONF error. The
// error never contains a secret.
func (s Source) APIKey(ctx context.Context, provider, envOverride string) (string, error) {
	names := EnvNames(provider, envOverride)
	if s.LookupEnv != nil {
		for _, n := range names {
			if v, ok := s.LookupEnv(n); ok && strings.TrimSpace(v) != "" {
				return strings.TrimSpace(v), nil
			}
		}
	}
	if s.Keychain != nil {
		if v, ok := s.keychain(ctx, Service(provider)); ok {
			return v, nil
		}
	}
	return "", errs.New(errs.ENOTCONF, "provider %s is not configured: set %s or add keychain item service=%s account=%s",
		provider, strings.Join(names, " or "), Service(provider), Account)
}

// keychain runs the look-up on its own goroutine so a stuck secret service
// cannot hold the caller past the timeout. The goroutine ends with the
// look-up; the buffered channel lets it finish without a reader.
func (s Source) keychain(ctx context.Context, service string) (string, bool) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = DefaultKeychainTimeout
	}
	type result struct {
		v   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := s.Keychain.Get(service, Account)
		ch <- result{v, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.v, r.err == nil && r.v != ""
	case <-t.C:
		return "", false
	case <-ctx.Done():
		return "", false
	}
}
