package storage

import (
	"errors"
	"fmt"

	"github.com/syncnode/syncnode/ssp2"
)

// ErrTxAborted is returned by every Tx method after a database error inside
// the transaction, until a Savepoint taken before the error is rolled back,
// and by WriteTx when fn returns nil for such a transaction (which is then
// rolled back).
var ErrTxAborted = errors.New("storage: transaction aborted by an earlier error")

// ConstraintKind names the class of a database constraint violation.
type ConstraintKind string

const (
	ConstraintUnique     ConstraintKind = "unique"
	ConstraintNotNull    ConstraintKind = "not_null"
	ConstraintCheck      ConstraintKind = "check"
	ConstraintForeignKey ConstraintKind = "foreign_key"
)

// ConstraintError is a write refused by a database constraint, recognized
// positively from the engine's structured error code (SQLite extended
// result codes, PostgreSQL SQLSTATE class 23). Its fields carry no engine
// text; the cause is kept for logs only.
type ConstraintError struct {
	Kind  ConstraintKind
	Table string
	cause error
}

// NewConstraintError is for Store implementations.
func NewConstraintError(kind ConstraintKind, table string, cause error) *ConstraintError {
	return &ConstraintError{Kind: kind, Table: table, cause: cause}
}

func (e *ConstraintError) Error() string {
	return fmt.Sprintf("%s constraint violated on table %s", e.Kind, e.Table)
}

// Unwrap returns the driver error.
func (e *ConstraintError) Unwrap() error { return e.cause }

// Is makes errors.Is(err, &ssp2.Error{Code: ssp2.CodeConstraintViolation})
// match a constraint error.
func (e *ConstraintError) Is(target error) bool {
	t, ok := target.(*ssp2.Error)
	return ok && t.Code == ssp2.CodeConstraintViolation
}
