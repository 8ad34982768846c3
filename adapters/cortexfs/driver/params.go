package driver

import (
	"strconv"

	"github.com/cbth-dev/cbth/internal/errs"
)

// Params are the generation defaults every driver understands.
type Params struct {
	Temperature *float64
	TopP        *float64
	MaxTokens   *int64
	BaseURL     string
}

// ParamsOf reads temperature, top_p, max_tokens and base_url from the
// request defaults.
func ParamsOf(r Request) (Params, error) {
	var p Params
	if v, ok := r.Default("temperature"); ok && v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return p, errs.Wrap(errs.EINVAL, err, "default temperature")
		}
		p.Temperature = &f
	}
	if v, ok := r.Default("top_p"); ok && v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return p, errs.Wrap(errs.EINVAL, err, "default top_p")
		}
		p.TopP = &f
	}
	if v, ok := r.Default("max_tokens"); ok && v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return p, errs.New(errs.EINVAL, "default max_tokens must be a positive integer")
		}
		p.MaxTokens = &n
	}
	p.BaseURL, _ = r.Default("base_url")
	return p, nil
}
