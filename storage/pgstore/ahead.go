package pgstore

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
)

// Rows read ahead (storage.RowPrefetcher). Under the partition lock every
// statement is a round trip that the partition's next writer waits for,
// and a push reads every row it writes first (authorization, conflicts).
// So the rows a write group's member names are read with the round trip
// before its turn: the leader's in the lock's pipeline, the first
// member's with the leader's queued writes, every later member's with the
// release of the member before it. Only this transaction writes the
// partition's rows while it holds the lock, so a row read ahead stays as
// read until the transaction writes it: RowUpsert and RowDelete drop it,
// a rollback to a savepoint drops them all, and RowGet takes it once.

// maxRowsAhead bounds the rows one WriteTxRows call reads ahead.
const maxRowsAhead = 256

type rowKey struct{ table, rowID string }

type rowAhead struct {
	row storage.Row
	ok  bool // the row exists
}

var _ storage.RowPrefetcher = (*Store)(nil)

// WriteTxRows implements storage.RowPrefetcher.
func (s *Store) WriteTxRows(ctx context.Context, partition string, rows []storage.RowRef, fn func(tx storage.Tx) error) error {
	if len(rows) > maxRowsAhead {
		rows = rows[:maxRowsAhead]
	}
	return s.groupWrite(ctx, partition, rows, func(t *tx) error { return fn(t) })
}

var _ storage.TxRowPrefetcher = (*tx)(nil)

// PrefetchRows implements storage.TxRowPrefetcher: the rows not read
// ahead already, with the queued statements, in one round trip.
func (t *tx) PrefetchRows(ctx context.Context, rows []storage.RowRef) error {
	if err := t.check(); err != nil {
		return err
	}
	if len(rows) > maxRowsAhead {
		rows = rows[:maxRowsAhead]
	}
	queued := 0
	if t.pending != nil {
		queued = t.pending.Len()
	}
	t.queueRows(t.locked.ID, rows)
	if t.pending == nil || t.pending.Len() == queued {
		return nil // every row is read ahead already
	}
	if err := t.send(ctx, nil); err != nil {
		return t.fail("read rows ahead", "", err)
	}
	return nil
}

// queueRows queues the reads of the partition's rows not read ahead
// already, one statement per table.
func (t *tx) queueRows(partition string, refs []storage.RowRef) {
	if len(refs) == 0 || t.inst == nil {
		return
	}
	var tables []string
	ids := map[string][]string{}
	for _, r := range refs {
		if _, ok := t.inst.tables[r.Table]; !ok || !storable(r.RowID) {
			// A name read ahead must not fail the transaction: a row id
			// that text cannot hold is refused by the push, not here.
			continue
		}
		if _, ok := t.ahead[rowKey{r.Table, r.RowID}]; ok {
			continue
		}
		if _, ok := ids[r.Table]; !ok {
			tables = append(tables, r.Table)
		}
		ids[r.Table] = append(ids[r.Table], r.RowID)
	}
	for _, table := range tables {
		ts, want := t.inst.tables[table], ids[table]
		t.queueQuery(func(rows pgx.Rows) error {
			found := make(map[string]storage.Row, len(want))
			for rows.Next() {
				var r storage.Row
				var scopes string
				if err := rows.Scan(&r.RowID, &r.ServerVersion, &scopes, &r.Payload, &r.ColumnVersions); err != nil {
					return err
				}
				var err error
				if r.Scopes, err = commitlog.ParseScopesJSON([]byte(scopes)); err != nil {
					return nil // RowGet reads it again and reports it
				}
				found[r.RowID] = r
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if t.ahead == nil {
				t.ahead = make(map[rowKey]rowAhead, len(want))
			}
			for _, id := range want {
				r, ok := found[id]
				t.ahead[rowKey{table, id}] = rowAhead{row: r, ok: ok}
			}
			return nil
		}, ts.getMany, partition, want)
	}
}

// storable reports whether a text column can hold s.
func storable(s string) bool {
	return strings.IndexByte(s, 0) < 0 && utf8.ValidString(s)
}

// takeAhead returns, once, a row of the locked partition read ahead.
func (t *tx) takeAhead(partition, table, rowID string) (rowAhead, bool) {
	k := rowKey{table, rowID}
	a, ok := t.ahead[k]
	if !ok || partition != t.locked.ID {
		return rowAhead{}, false
	}
	delete(t.ahead, k)
	return a, true
}

// nextRows returns the rows named by the group's next waiting member.
func (s *Store) nextRows(g *writeGroup) []storage.RowRef {
	s.groups.mu.Lock()
	defer s.groups.mu.Unlock()
	if len(g.waiting) == 0 {
		return nil
	}
	return g.waiting[0].rows
}
