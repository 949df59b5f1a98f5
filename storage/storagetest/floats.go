package storagetest

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/syncnode/syncnode/storage"
)

// testFloatNaN: SQL has no portable NaN (SQLite turns it into NULL), so
// both stores store a NaN as NULL in its typed column: a nullable column
// takes it, a non-nullable one refuses it as a NOT NULL violation, alike
// on both. The payload keeps the bits either way.
func testFloatNaN(t *testing.T, e *env) {
	s, sc := e.store()
	p := partition(t, s)
	ctx := t.Context()
	nan := rowWrite(t, table(t, sc, "tasks"), values{"id": "nan", "project_id": "p1", "owner_id": 1, "done": false, "score": math.NaN()})
	inf := rowWrite(t, table(t, sc, "tasks"), values{"id": "inf", "project_id": "p1", "owner_id": 1, "done": false, "score": math.Inf(-1)})
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		for _, w := range []storage.RowWrite{nan, inf} {
			if _, err := tx.RowUpsert(ctx, "tasks", w); err != nil {
				return err
			}
			r, ok, err := tx.RowGet(ctx, p.ID, "tasks", w.RowID)
			if err != nil || !ok || !bytes.Equal(r.Payload, w.Payload) {
				t.Fatalf("row %s = %+v, %v, %v; want its payload", w.RowID, r, ok, err)
			}
		}
		return nil
	})

	writeTx(t, s, p.ID, func(tx storage.Tx) error { // a NOT NULL constraint needs a table without NULLs
		_, err := tx.RowDelete(ctx, "tasks", "nan")
		return err
	})
	check(t, hooks(t, s).HookConstrain(ctx, "tasks", "score", storage.ConstraintNotNull))
	writeTx(t, s, p.ID, func(tx storage.Tx) error {
		sp, err := tx.Savepoint(ctx)
		if err != nil {
			return err
		}
		w := nan
		w.RowID = "nan2"
		w.Values[0].Bytes = []byte("nan2")
		_, err = tx.RowUpsert(ctx, "tasks", w)
		var ce *storage.ConstraintError
		if !errors.As(err, &ce) || ce.Kind != storage.ConstraintNotNull {
			t.Fatalf("NaN into a NOT NULL float column = %v, want a not_null constraint error", err)
		}
		return sp.Rollback(ctx)
	})
}
