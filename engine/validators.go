package engine

import (
	"context"
	"fmt"
	"maps"

	"github.com/syncnode/syncnode/schema"
)

// validatorSet is the per-table and whole-commit validators in force. It
// is immutable once stored: SetValidators installs a new set, so a commit
// that loaded the old one finishes with it and the next commit sees the new
// one — never a mix.
type validatorSet struct {
	rows   map[string]RowValidator
	commit CommitValidator
}

func newValidatorSet(s *schema.Schema, rows map[string]RowValidator, commit CommitValidator) (*validatorSet, error) {
	vs := &validatorSet{rows: make(map[string]RowValidator, len(rows)), commit: commit}
	for table, v := range rows {
		if _, ok := s.Table(table); !ok {
			return nil, fmt.Errorf("validator for unknown table %q", table)
		}
		if v != nil {
			vs.rows[table] = v
		}
	}
	return vs, nil
}

// SetValidators replaces the per-table write validators (SPEC.md §6.7) and
// the whole-commit validator (§6.8) at once; nil or empty arguments remove
// them. A commit already past its first operation keeps the validators it
// started with. It refuses, changing nothing, a validator for a table the
// schema does not declare. rows is copied.
func (e *Engine) SetValidators(rows map[string]RowValidator, commit CommitValidator) error {
	vs, err := newValidatorSet(e.cfg.Schema, maps.Clone(rows), commit)
	if err != nil {
		return fmt.Errorf("set validators: %w", err)
	}
	e.validators.Store(vs)
	return nil
}

// ChainCommitValidators runs whole-commit validators in order; the first
// one that does not accept decides. Nil validators are skipped; with none
// left it returns nil.
func ChainCommitValidators(vs ...CommitValidator) CommitValidator {
	var chain []CommitValidator
	for _, v := range vs {
		if v != nil {
			chain = append(chain, v)
		}
	}
	switch len(chain) {
	case 0:
		return nil
	case 1:
		return chain[0]
	}
	return func(ctx context.Context, v CommitValidation) error {
		for _, cv := range chain {
			if err := cv(ctx, v); err != nil {
				return err
			}
		}
		return nil
	}
}
