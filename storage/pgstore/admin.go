package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/admincore"
	"github.com/syncnode/syncnode/storage/internal/blobcore"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

var _ storage.Admin = (*Store)(nil)

// installedTable resolves a table of the installed schema outside a tx.
func installedTable(in *installed, op, name string) (*tableSQL, error) {
	t := &tx{inst: in}
	return t.table(op, name)
}

// RowList implements storage.Admin: one statement, so one snapshot.
func (s *Store) RowList(ctx context.Context, p storage.RowListParams) ([]storage.Row, error) {
	if err := admincore.CheckListLimit(p.Limit); err != nil {
		return nil, err
	}
	ts, err := installedTable(s.schema.Load(), "list rows", p.Table)
	if err != nil {
		return nil, err
	}
	q := fmt.Sprintf("SELECT %s, %s, %s, %s FROM %s WHERE %s = $1 AND %s > $2 ORDER BY %s LIMIT $3",
		quote(schemaplan.ColRowID), quote(schemaplan.ColServerVersion), quote(schemaplan.ColScopes), quote(schemaplan.ColPayload),
		quote(ts.t.Name), quote(schemaplan.ColPartition), quote(schemaplan.ColRowID), quote(schemaplan.ColRowID))
	rows, err := s.pool.Query(ctx, q, p.Partition, p.AfterRowID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list rows: %w", err)
	}
	defer rows.Close()
	out := make([]storage.Row, 0, min(p.Limit, 1024))
	for rows.Next() {
		var r storage.Row
		var scopes string
		if err := rows.Scan(&r.RowID, &r.ServerVersion, &scopes, &r.Payload); err != nil {
			return nil, fmt.Errorf("list rows: %w", err)
		}
		if r.Scopes, err = commitlog.ParseScopesJSON([]byte(scopes)); err != nil {
			return nil, fmt.Errorf("list rows: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list rows: %w", err)
	}
	return out, nil
}

// RowSeed implements storage.Admin with COPY FROM inside a write
// transaction holding the partition's row lock.
func (s *Store) RowSeed(ctx context.Context, p storage.SeedParams) error {
	if err := admincore.CheckSeedCount(p.Count); err != nil {
		return err
	}
	ts, err := installedTable(s.schema.Load(), "seed rows", p.Table)
	if err != nil {
		return err
	}
	if p.Count == 0 {
		return nil
	}
	cols := []string{schemaplan.ColPartition, schemaplan.ColRowID, schemaplan.ColServerVersion, schemaplan.ColScopes, schemaplan.ColPayload}
	for _, c := range ts.t.Columns {
		cols = append(cols, c.Name)
	}
	err = s.writeTx(ctx, p.Partition, func(t *tx) error {
		if err := t.send(ctx, nil); err != nil {
			return t.fail("seed rows", "", err)
		}
		var (
			w      storage.RowWrite
			i      int
			rowErr error
			refs   [][]any // the rows' blob references, copied after them
			ids    []string
		)
		src := pgx.CopyFromFunc(func() ([]any, error) {
			if i == p.Count {
				return nil, nil
			}
			if err := p.Row(i, &w); err != nil {
				rowErr = fmt.Errorf("row %d: %w", i, err)
				return nil, rowErr
			}
			if rowErr = admincore.CheckSeedRow(i, &w, ts.t); rowErr != nil {
				return nil, rowErr
			}
			i++
			payload := w.Payload
			if payload == nil {
				payload = []byte{}
			}
			vals := make([]any, 0, len(cols))
			scopes := string(commitlog.AppendScopesJSON(nil, w.Scopes))
			vals = append(vals, p.Partition, w.RowID, int64(1), scopes, payload)
			if ts.blobRefs {
				ids = blobcore.RefIDs(ts.t, w.Values, ids[:0])
				for _, id := range ids {
					refs = append(refs, []any{p.Partition, id, ts.t.Name, w.RowID, scopes})
				}
			}
			for j, c := range ts.t.Columns {
				vals = append(vals, bindValue(c.Type, w.Values[j]))
			}
			return vals, nil
		})
		if _, err := t.c.Conn().CopyFrom(ctx, pgx.Identifier{ts.t.Name}, cols, src); err != nil {
			t.aborted = true
			if rowErr != nil {
				return rowErr
			}
			return t.fail("seed rows", ts.t.Name, err)
		}
		if len(refs) > 0 {
			if _, err := t.c.Conn().CopyFrom(ctx, pgx.Identifier{"sync_blob_refs"}, []string{"partition", "blob_id", "tbl", "row_id", "scopes"}, pgx.CopyFromRows(refs)); err != nil {
				t.aborted = true
				return t.fail("seed rows", "sync_blob_refs", err)
			}
		}
		t.s.analyzer.wrote(ts.t.Name, p.Count)
		return nil
	})
	if err != nil {
		return fmt.Errorf("seed rows: %w", err)
	}
	return nil
}

// PartitionWipe implements storage.Admin under the partition's row lock.
func (s *Store) PartitionWipe(ctx context.Context, partition string) error {
	return s.wipe(ctx, partition, nil)
}

// PartitionWipeFrom implements storage.Admin: the check runs under the
// same row lock as the wipe.
func (s *Store) PartitionWipeFrom(ctx context.Context, partition, fromEpoch string, minSeq int64) error {
	return s.wipe(ctx, partition, &storage.WipeFence{Epoch: fromEpoch, MinSeq: minSeq})
}

func (s *Store) wipe(ctx context.Context, partition string, fence *storage.WipeFence) error {
	defer s.cache.Drop(partition)
	err := s.writeTx(ctx, partition, func(t *tx) error {
		if err := fence.Check(partition, t.Locked()); err != nil {
			return err
		}
		var sc *schema.Schema
		if t.inst != nil {
			sc = t.inst.schema
		}
		for _, w := range admincore.WipeTargets(sc) {
			if _, err := t.exec(ctx, "DELETE FROM "+quote(w.Table)+" WHERE "+quote(w.Column)+" = $1", partition); err != nil {
				return t.fail("wipe partition", w.Table, err)
			}
		}
		return nil
	})
	if ssp2.CodeOf(err) == ssp2.CodeStoragePartitionUnregistered {
		return fence.Check(partition, storage.Partition{})
	}
	if err != nil {
		return fmt.Errorf("wipe partition: %w", err)
	}
	return nil
}
