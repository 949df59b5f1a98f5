package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/querysql"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

// Registered queries (REMOTE.md §2) on PostgreSQL run like SQLite's
// (sqlitestore/query.go): the statement behind a WITH clause whose common
// table expressions, named like the application tables it reads, select
// each table's application columns where the partition and the covered
// scope values match bound values (schemaplan.QueryRelations). An
// unqualified name resolves to a common table expression before any
// table, so the statement reads only those relations; as a second fence
// the query's transaction sets search_path to pg_catalog alone, so no
// other unqualified name reaches a table or function of the store's
// schema. The statement itself was checked by SQLite's parser at
// registration (sqlitestore.CheckQuery); its ? placeholders become $n
// after the relations' own.

// qQueryStart is the first statement of a query's transaction: the fence
// on search_path, the partition row (its max commitSeq as partitionCols
// reads it) and the caller's client record, always one row (the
// partition columns are defaults when it has no row).
func (s *Store) qQueryStart() string {
	sch := quote(s.cfg.Schema)
	return `SELECT set_config('search_path', 'pg_catalog', true), p.id IS NOT NULL,
	coalesce(p.id, ''), coalesce(p.log_epoch, ''), coalesce(p.epoch_required, false), coalesce(p.created_at_ms, 0), coalesce(p.last_seen_ms, 0),
	coalesce((SELECT m.seq FROM ` + sch + `.sync_commits m WHERE m.partition = p.id ORDER BY m.seq DESC LIMIT 1), p.horizon_seq, 0),
	coalesce(p.horizon_seq, 0),
	c.client_id IS NOT NULL, coalesce(c.actor_id, ''), coalesce(c.wire_version, 0), coalesce(c.cursor, -1), coalesce(c.updated_at_ms, 0), c.subscriptions
	FROM (VALUES (1)) AS one
	LEFT JOIN ` + sch + `.sync_partitions p ON p.id = $1
	LEFT JOIN ` + sch + `.sync_clients c ON c.partition = p.id AND c.client_id = $2`
}

// opStatement is the statement a registered query runs as, reading at
// most p.Limit rows, and its arguments: the partition, the relations'
// scope values, then the request's values.
func (s *Store) opStatement(p *storage.QueryParams) (string, []any, error) {
	in := s.schema.Load()
	if in == nil {
		return "", nil, errors.New("query: no schema installed")
	}
	if p.Limit < 1 {
		return "", nil, fmt.Errorf("query limit %d: a registered query reads at least one row", p.Limit)
	}
	sh, err := querysql.Lex(p.SQL)
	if err != nil {
		return "", nil, &storage.QueryError{Err: err}
	}
	sch := quote(s.cfg.Schema)
	defs, scopeArgs, err := schemaplan.QueryRelations(in.schema, p,
		func(t string) string { return sch + "." + quote(t) },
		func(n int) string { return "$" + strconv.Itoa(n) })
	if err != nil {
		return "", nil, err
	}
	first := 1 + len(scopeArgs)
	// Numbering changes the text only after the first placeholder, past
	// the keyword offsets Limited reads.
	sh.Body = querysql.Numbered(sh, func(n int) string { return "$" + strconv.Itoa(first+n) })
	args := make([]any, 0, first+len(p.Args))
	args = append(args, p.Partition)
	args = append(args, scopeArgs...)
	args = append(args, p.Args...)
	return querysql.Limited(sh, defs, p.Limit), args, nil
}

// PrepareQuery implements storage.Querier: PostgreSQL parses and plans
// the statement, privileged and scoped, under the query's search_path.
func (s *Store) PrepareQuery(ctx context.Context, q storage.QuerySpec) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	return pgx.BeginTxFunc(ctx, c, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('search_path', 'pg_catalog', true)"); err != nil {
			return err
		}
		for _, scopes := range []map[string]map[string][]string{nil, {}} {
			text, _, err := s.opStatement(&storage.QueryParams{QuerySpec: q, Scopes: scopes})
			if err != nil {
				return err
			}
			if _, err := tx.Prepare(ctx, "", text); err != nil {
				return err
			}
		}
		return nil
	})
}

// Query implements storage.Querier: BEGIN (repeatable read, read only),
// the start read, the statement and COMMIT go to the server as one
// pipelined batch, one round trip.
func (s *Store) Query(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error) {
	text, args, err := s.opStatement(&p)
	if err != nil {
		return storage.QueryResult{}, err
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return storage.QueryResult{}, err
	}
	defer c.Release()
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	b.Queue(s.qQueryStart(), p.Partition, p.ClientID)
	b.Queue(text, args...)
	b.Queue("COMMIT")
	br := c.SendBatch(ctx, b)
	out, err := readQueryBatch(br, &p)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		if c.Conn().PgConn().TxStatus() != 'I' {
			_, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		}
		return storage.QueryResult{}, err
	}
	return out, nil
}

// readQueryBatch reads the results of Query's batch in order.
func readQueryBatch(br pgx.BatchResults, p *storage.QueryParams) (storage.QueryResult, error) {
	var out storage.QueryResult
	if _, err := br.Exec(); err != nil {
		return out, fmt.Errorf("query start: %w", err)
	}
	var (
		st   = &out.Start
		pt   = &st.Partition
		cl   = &st.Client
		wire int32
		subs *string
	)
	if err := br.QueryRow().Scan(nil, &out.HasPartition,
		&pt.ID, &pt.LogEpoch, &pt.EpochRequired, &pt.CreatedAtMs, &pt.LastSeenMs, &pt.MaxCommitSeq, &pt.HorizonSeq,
		&st.HasClient, &cl.ActorID, &wire, &cl.Cursor, &cl.UpdatedAtMs, &subs); err != nil {
		return out, fmt.Errorf("query start: %w", err)
	}
	if st.HasClient {
		cl.Partition, cl.ClientID, cl.WireVersion = pt.ID, p.ClientID, uint16(wire)
		if subs != nil {
			cl.Subscriptions = []byte(*subs)
		}
	} else {
		*cl = storage.Client{}
	}
	out.MaxCommitSeq = pt.MaxCommitSeq
	rows, err := br.Query()
	if err != nil {
		return out, &storage.QueryError{Err: err}
	}
	if out.Rows, err = readQueryRows(rows, p); err != nil {
		return out, err
	}
	if _, err := br.Exec(); err != nil {
		return out, fmt.Errorf("query commit: %w", err)
	}
	return out, nil
}

// readQueryRows reads a registered query's rows: at most p.Limit, each
// normalized to the declared columns. It closes rows.
func readQueryRows(rows pgx.Rows, p *storage.QueryParams) ([][]any, error) {
	defer rows.Close()
	var (
		idx  []int
		err  error
		n    = len(p.Columns)
		slab []any // the rows' values, a block of rows at a time
	)
	out := make([][]any, 0, min(p.Limit, 256))
	for rows.Next() {
		if idx == nil {
			fds := rows.FieldDescriptions()
			names := make([]string, len(fds))
			for i, f := range fds {
				names[i] = f.Name
			}
			if idx, err = resultIndex(names, p.Columns); err != nil {
				return nil, err
			}
		}
		if len(out) == p.Limit {
			break
		}
		vals, err := rows.Values()
		if err != nil {
			return nil, &storage.QueryError{Err: err}
		}
		if len(slab) < n {
			slab = make([]any, n*min(p.Limit-len(out), 64))
		}
		row := slab[:n:n]
		slab = slab[n:]
		for i, col := range p.Columns {
			if row[i], err = storage.NormalizeQueryValue(col, numeric(vals[idx[i]])); err != nil {
				return nil, err
			}
		}
		out = append(out, row)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, &storage.QueryError{Err: err}
	}
	return out, nil
}

// numeric turns a numeric (sum of bigints, say) into an int64 when
// whole, else a float64, for NormalizeQueryValue.
func numeric(v any) any {
	n, ok := v.(pgtype.Numeric)
	if !ok {
		return v
	}
	if i, err := n.Int64Value(); err == nil && i.Valid {
		if f, err := n.Float64Value(); err == nil && f.Float64 == float64(i.Int64) {
			return i.Int64
		}
	}
	if f, err := n.Float64Value(); err == nil && f.Valid {
		return f.Float64
	}
	return v
}

// resultIndex maps each declared column to its position in the result.
func resultIndex(names []string, cols []storage.QueryColumn) ([]int, error) {
	idx := make([]int, len(cols))
	for i, c := range cols {
		j := -1
		for k, n := range names {
			if n == c.Name {
				j = k
				break
			}
		}
		if j < 0 {
			return nil, &storage.QueryError{Column: c.Name, Err: errors.New("missing from the result")}
		}
		idx[i] = j
	}
	return idx, nil
}

var _ storage.Querier = (*Store)(nil)
