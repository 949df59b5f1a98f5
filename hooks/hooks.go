package hooks

import (
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/clock"
)

// Config selects the hooks a node asks; a nil field is off. New fills in
// the connection, the metrics and the clock of each.
type Config struct {
	Scopes   *ScopesConfig
	Validate *ValidateConfig
	Token    *TokenConfig
}

// Set is the hook clients of a node; the fields of hooks that are off are
// nil.
type Set struct {
	Scopes    *Scopes
	Validator *Validator
	Tokens    *Tokens
}

// New builds the hooks cfg turns on, asking on nc.
func New(nc *nats.Conn, cfg Config, m *Metrics, clk clock.Clock) (*Set, error) {
	var (
		s    Set
		errs []error
		err  error
	)
	if c := cfg.Scopes; c != nil {
		cc := *c
		cc.Conn, cc.Metrics, cc.Cache.Clock = nc, m, clk
		s.Scopes, err = NewScopes(cc)
		errs = append(errs, err)
	}
	if c := cfg.Validate; c != nil {
		cc := *c
		cc.Conn, cc.Metrics = nc, m
		s.Validator, err = NewValidator(cc)
		errs = append(errs, err)
	}
	if c := cfg.Token; c != nil {
		cc := *c
		cc.Conn, cc.Metrics, cc.Cache.Clock = nc, m, clk
		s.Tokens, err = NewTokens(cc)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &s, nil
}

// Names lists the hooks that are on (bus.HookScopes, …).
func (s *Set) Names() []string {
	var out []string
	if s.Scopes != nil {
		out = append(out, bus.HookScopes)
	}
	if s.Validator != nil {
		out = append(out, bus.HookValidate)
	}
	if s.Tokens != nil {
		out = append(out, bus.HookToken)
	}
	return out
}
