package sqlitestore

import (
	"context"
	"fmt"
	"strings"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/admincore"
	"github.com/syncnode/syncnode/storage/internal/blobcore"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

var _ storage.Admin = (*Store)(nil)

// RowList implements storage.Admin on a reader connection: one statement,
// so one snapshot.
func (s *Store) RowList(ctx context.Context, p storage.RowListParams) ([]storage.Row, error) {
	if err := admincore.CheckListLimit(p.Limit); err != nil {
		return nil, err
	}
	ts, err := installedTable(s.schema.Load(), "list rows", p.Table)
	if err != nil {
		return nil, err
	}
	q := fmt.Sprintf("SELECT %s, %s, %s, %s FROM %s WHERE %s = ? AND %s > ? ORDER BY %s LIMIT +?",
		quote(schemaplan.ColRowID), quote(schemaplan.ColServerVersion), quote(schemaplan.ColScopes), quote(schemaplan.ColPayload),
		quote(ts.t.Name), quote(schemaplan.ColPartition), quote(schemaplan.ColRowID), quote(schemaplan.ColRowID))
	out := make([]storage.Row, 0, min(p.Limit, 1024))
	err = s.withReader(ctx, func(c *conn) error {
		rows, err := c.query(ctx, q, p.Partition, p.AfterRowID, p.Limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r storage.Row
			var scopes []byte
			if err := rows.Scan(&r.RowID, &r.ServerVersion, &scopes, &r.Payload); err != nil {
				return err
			}
			if r.Scopes, err = commitlog.ParseScopesJSON(scopes); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list rows: %w", err)
	}
	return out, nil
}

// installedTable resolves a table of the installed schema outside a tx.
func installedTable(in *installed, op, name string) (*tableSQL, error) {
	t := &tx{inst: in}
	return t.table(op, name)
}

// seedSQL is a plain INSERT of one row at server version 1: a row that
// exists is a primary-key violation, not an update.
func seedSQL(t *schema.Table) string {
	cols := []string{quote(schemaplan.ColPartition), quote(schemaplan.ColRowID), quote(schemaplan.ColServerVersion),
		quote(schemaplan.ColScopes), quote(schemaplan.ColPayload)}
	vals := []string{"?", "?", "1", "?", "?"}
	for _, c := range t.Columns {
		cols = append(cols, quote(c.Name))
		vals = append(vals, "?")
	}
	return fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", quote(t.Name), strings.Join(cols, ", "), strings.Join(vals, ", "))
}

// RowSeed implements storage.Admin as one member of the writer's group
// transactions: one prepared INSERT per row on the writer connection.
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
	q := seedSQL(ts.t)
	err = s.WriteTx(ctx, p.Partition, func(stx storage.Tx) error {
		t := rawTx(stx)
		var w storage.RowWrite
		args := make([]any, 0, 4+len(ts.t.Columns))
		var (
			scopes []byte
			ids    []string
		)
		for i := range p.Count {
			if i%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if err := p.Row(i, &w); err != nil {
				return fmt.Errorf("row %d: %w", i, err)
			}
			if err := admincore.CheckSeedRow(i, &w, ts.t); err != nil {
				return err
			}
			scopes = commitlog.AppendScopesJSON(scopes[:0], w.Scopes)
			payload := w.Payload
			if payload == nil {
				payload = []byte{}
			}
			args = append(args[:0], p.Partition, w.RowID, string(scopes), payload)
			for j, c := range ts.t.Columns {
				args = append(args, bindValue(c.Type, w.Values[j]))
			}
			if _, err := t.c.exec(ctx, q, args...); err != nil {
				return t.fail("seed rows", ts.t.Name, err)
			}
			if ts.blobRefs {
				ids = blobcore.RefIDs(ts.t, w.Values, ids[:0])
				for _, id := range ids {
					if _, err := t.c.exec(ctx, qBlobRefInsert, p.Partition, id, ts.t.Name, w.RowID, string(scopes)); err != nil {
						return t.fail("seed rows", ts.t.Name, err)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("seed rows: %w", err)
	}
	return nil
}

// PartitionWipe implements storage.Admin under the partition write lock.
func (s *Store) PartitionWipe(ctx context.Context, partition string) error {
	return s.wipe(ctx, partition, nil)
}

// PartitionWipeFrom implements storage.Admin: the check runs in the
// same write transaction as the wipe.
func (s *Store) PartitionWipeFrom(ctx context.Context, partition, fromEpoch string, minSeq int64) error {
	return s.wipe(ctx, partition, &storage.WipeFence{Epoch: fromEpoch, MinSeq: minSeq})
}

func (s *Store) wipe(ctx context.Context, partition string, fence *storage.WipeFence) error {
	defer s.cache.Drop(partition)
	err := s.WriteTx(ctx, partition, func(stx storage.Tx) error {
		t := rawTx(stx)
		if err := fence.Check(partition, t.Locked()); err != nil {
			return err
		}
		var sc *schema.Schema
		if t.inst != nil {
			sc = t.inst.schema
		}
		for _, w := range admincore.WipeTargets(sc) {
			if _, err := t.c.exec(ctx, "DELETE FROM "+quote(w.Table)+" WHERE "+quote(w.Column)+" = ?", partition); err != nil {
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
