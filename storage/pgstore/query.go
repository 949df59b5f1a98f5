package pgstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncnode/syncnode/schema"
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
// the statement runs with search_path holding pg_catalog alone, so no
// other unqualified name reaches a table or function of the store's
// schema. The statement itself was checked by SQLite's parser at
// registration (sqlitestore.CheckQuery); its ? placeholders become $n
// after the relations' own.
//
// Run on its own (Query), the statement is folded with the partition row
// and the caller's client record into one (querysql.Folded): one
// statement is one snapshot, so it needs no transaction of its own, and
// it runs on a pool of its own whose sessions have that search_path and
// are read-only (newQueryPool), so it needs no statement to set them
// either: one statement, one round trip. Inside a write transaction
// (TxQuery) the fence is set and undone around the statement.

// newQueryPool is the pool of registered queries' connections: the
// store's settings, but search_path = pg_catalog (the fence), read-only
// transactions, no parallel workers (the start row's arm and the
// statement's then run in one process, as a UNION ALL's arms, in order),
// and a quarter of the store's connections — apart from the sync path's,
// so a long query never holds a connection a push waits for. It connects
// on first use.
func newQueryPool(ctx context.Context, pc *pgxpool.Config) (*pgxpool.Pool, error) {
	qc := pc.Copy()
	qc.MaxConns = max(1, pc.MaxConns/4)
	qc.MinConns = 0
	params := make(map[string]string, len(pc.ConnConfig.RuntimeParams)+3)
	for k, v := range pc.ConnConfig.RuntimeParams {
		params[k] = v
	}
	params["search_path"] = "pg_catalog"
	params["default_transaction_read_only"] = "on"
	params["max_parallel_workers_per_gather"] = "0"
	qc.ConnConfig.RuntimeParams = params
	pool, err := pgxpool.NewWithConfig(ctx, qc)
	if err != nil {
		return nil, fmt.Errorf("pgstore: query pool: %w", err)
	}
	return pool, nil
}

// startRow is the start row of a folded statement on PostgreSQL
// (querysql.ParseStart's form): $1 is the partition, client the
// placeholder of the caller's client id. It reads the partition row
// itself, so a partition without one gives no start row (Query reads that
// as absent) and the arm plans as one join of two index lookups. The
// header is one concat_ws of its numbers (a client's coalesced: concat_ws
// skips a NULL), the strings one concat after it: two calls where a chain
// of || would make a text per operator.
func (s *Store) startRow(client string) querysql.Start {
	sch := quote(s.cfg.Schema)
	return querysql.Start{
		Expr: `concat(concat_ws(',', 1, p.epoch_required::int, p.created_at_ms, p.last_seen_ms,
	coalesce((SELECT m.seq FROM ` + sch + `.sync_commits m WHERE m.partition = p.id ORDER BY m.seq DESC LIMIT 1), p.horizon_seq),
	p.horizon_seq, (c.client_id IS NOT NULL)::int, coalesce(c.wire_version, 0), coalesce(c.cursor, -1),
	coalesce(c.updated_at_ms, 0), octet_length(p.log_epoch), coalesce(octet_length(c.actor_id), 0),
	coalesce(octet_length(c.subscriptions), -1)), ';', p.log_epoch, c.actor_id, c.subscriptions)`,
		From: sch + `.sync_partitions p
	LEFT JOIN ` + sch + `.sync_clients c ON c.partition = p.id AND c.client_id = ` + client + `
	WHERE p.id = $1`,
	}
}

// opStatement is the statement a registered query runs as, reading at
// most p.Limit rows, and its arguments: the partition, the relations'
// scope values, then the request's values.
func (s *Store) opStatement(p *storage.QueryParams) (string, []any, error) {
	return s.statement(p, false)
}

// queryStatement is the statement Query runs (querysql.Folded) and
// its arguments: the partition, the relations' scope values, the caller's
// client id, then the request's values.
func (s *Store) queryStatement(p *storage.QueryParams) (string, []any, error) {
	return s.statement(p, true)
}

func (s *Store) statement(p *storage.QueryParams, folded bool) (string, []any, error) {
	in := s.schema.Load()
	if in == nil {
		return "", nil, errors.New("query: no schema installed")
	}
	if p.Limit < 1 {
		return "", nil, fmt.Errorf("query limit %d: a registered query reads at least one row", p.Limit)
	}
	scopeArgs, counts, err := schemaplan.QueryRelationArgs(in.schema, p)
	if err != nil {
		return "", nil, err
	}
	args := make([]any, 0, 2+len(scopeArgs)+len(p.Args))
	args = append(args, p.Partition)
	args = append(args, scopeArgs...)
	if folded {
		args = append(args, p.ClientID)
	}
	args = append(args, p.Args...)
	var variant byte
	if folded {
		variant = 1
	}
	text, err := in.texts.Text(p, variant, counts, func() (string, error) { return s.writeStatement(in.schema, p, folded, counts) })
	if err != nil {
		return "", nil, err
	}
	return text, args, nil
}

// writeStatement writes the text of statement: the relations with
// counts scope values (schemaplan.QueryRelationArgs), the caller's client
// id next when folded, then the request's values.
func (s *Store) writeStatement(sc *schema.Schema, p *storage.QueryParams, folded bool, counts []int) (string, error) {
	sh, err := querysql.Lex(p.SQL)
	if err != nil {
		return "", &storage.QueryError{Err: err}
	}
	sch := quote(s.cfg.Schema)
	defs, err := schemaplan.QueryRelationDefs(sc, p.Tables, p.Scopes != nil, counts,
		func(t string) string { return sch + "." + quote(t) },
		func(n int) string { return "$" + strconv.Itoa(n) })
	if err != nil {
		return "", err
	}
	first := 1 // the partition
	for _, n := range counts {
		first += n
	}
	if folded {
		first++ // the client id
	}
	// Numbering changes the text only after the first placeholder, past
	// the keyword offsets Limited reads.
	sh.Body = querysql.Numbered(sh, func(n int) string { return "$" + strconv.Itoa(first+n) })
	if !folded {
		return querysql.Limited(sh, defs, p.Limit), nil
	}
	cols := make([]string, len(p.Columns))
	for i, c := range p.Columns {
		cols[i] = c.Name
	}
	return querysql.Folded(sh, defs, s.startRow("$"+strconv.Itoa(first)), cols, p.Limit), nil
}

// PrepareQuery implements storage.Querier: PostgreSQL parses and plans
// the statements, privileged and scoped, Query's and TxQuery's, under the
// queries' search_path.
func (s *Store) PrepareQuery(ctx context.Context, q storage.QuerySpec) error {
	c, err := s.queries.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	for _, scopes := range []map[string]map[string][]string{nil, {}} {
		for _, build := range []func(*storage.QueryParams) (string, []any, error){s.opStatement, s.queryStatement} {
			text, _, err := build(&storage.QueryParams{QuerySpec: q, Scopes: scopes})
			if err != nil {
				return err
			}
			if _, err := c.Conn().Prepare(ctx, "", text); err != nil {
				return err
			}
		}
	}
	return nil
}

// Query implements storage.Querier: one statement (queryStatement) on the
// query pool, its start row the partition row with the caller's client
// record (none when the partition has no row), its other rows the
// registered statement's.
func (s *Store) Query(ctx context.Context, p storage.QueryParams) (storage.QueryResult, error) {
	text, args, err := s.queryStatement(&p)
	if err != nil {
		return storage.QueryResult{}, err
	}
	rows, err := s.queries.Query(ctx, text, args...)
	if err != nil {
		return storage.QueryResult{}, &storage.QueryError{Err: err}
	}
	var (
		out     storage.QueryResult
		started bool
	)
	out.Rows, err = readRows(rows, &p, 1, func(start string) error {
		if started {
			return errors.New("query: a second start row")
		}
		started = true
		has, perr := querysql.ParseStart(start, p.Partition, p.ClientID, &out.Start)
		out.HasPartition = has
		return perr
	})
	if err != nil {
		return storage.QueryResult{}, err
	}
	// No start row: the partition has no row (out.Start stays zero).
	out.MaxCommitSeq = out.Start.Partition.MaxCommitSeq
	return out, nil
}

// readQueryRows reads a registered query's rows: at most p.Limit, each
// normalized to the declared columns. It closes rows.
func readQueryRows(rows pgx.Rows, p *storage.QueryParams) ([][]any, error) {
	return readRows(rows, p, 0, nil)
}

// readRows reads rows: at most p.Limit, each normalized to the declared
// columns. With start set, the result's first lead columns are a folded
// statement's start column (querysql.Folded) and then the declared
// columns in order: a row whose start column is not NULL is the start
// row, given to start. It closes rows.
func readRows(rows pgx.Rows, p *storage.QueryParams, lead int, start func(string) error) ([][]any, error) {
	defer rows.Close()
	var (
		idx  []int
		raw  []rawDecoder // set when every declared column decodes raw
		err  error
		n    = len(p.Columns)
		slab []any // the rows' values, a block of rows at a time
		text textArena
	)
	out := make([][]any, 0, min(p.Limit, 256))
	for rows.Next() {
		if idx == nil {
			fds := rows.FieldDescriptions()
			names := make([]string, len(fds)-min(lead, len(fds)))
			for i, f := range fds[len(fds)-len(names):] {
				names[i] = f.Name
			}
			if idx, err = resultIndex(names, p.Columns); err != nil {
				return nil, err
			}
			raw = rawDecoders(fds[len(fds)-len(names):], idx)
		}
		if start != nil {
			if raw := rows.RawValues(); len(raw) > 0 && raw[0] != nil {
				if err := start(string(raw[0])); err != nil {
					return nil, err
				}
				continue
			}
		}
		if len(out) == p.Limit {
			break
		}
		if len(slab) < n {
			slab = make([]any, n*min(p.Limit-len(out), 64))
		}
		row := slab[:n:n]
		slab = slab[n:]
		if raw != nil {
			vals := rows.RawValues()[lead:]
			for i, col := range p.Columns {
				var v any
				if b := vals[idx[i]]; b != nil {
					v = raw[i](b, &text)
				}
				if row[i], err = storage.NormalizeQueryValue(col, v); err != nil {
					return nil, err
				}
			}
			out = append(out, row)
			continue
		}
		vals, err := rows.Values()
		if err != nil {
			return nil, &storage.QueryError{Err: err}
		}
		vals = vals[lead:]
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

// rawDecoder decodes a column's non-NULL wire value, a text one into
// text.
type rawDecoder func(b []byte, text *textArena) any

// textArena holds the text values of a result's rows: a block of rows'
// strings in one allocation rather than one each. A block is only ever
// appended to, so the strings made over it never change.
type textArena struct{ buf []byte }

// textBlock is an arena block's size; a longer value has its own.
const textBlock = 4096

func (a *textArena) str(b []byte) string {
	switch {
	case len(b) == 0:
		return ""
	case len(b) > textBlock/4:
		return string(b)
	case cap(a.buf)-len(a.buf) < len(b):
		a.buf = make([]byte, 0, textBlock)
	}
	at := len(a.buf)
	a.buf = append(a.buf, b...)
	return unsafe.String(&a.buf[at], len(b))
}

// rawDecoders returns, for each declared column (idx: its field), a
// decoder of its wire value when every one is text, bigint, boolean or
// double precision in a form read here directly — what rows.Values()
// would return, without its per-row slice and codec lookups — and nil
// otherwise (the row is then read through Values()).
func rawDecoders(fds []pgconn.FieldDescription, idx []int) []rawDecoder {
	out := make([]rawDecoder, len(idx))
	for i, j := range idx {
		f := fds[j]
		switch {
		case f.DataTypeOID == pgtype.TextOID || f.DataTypeOID == pgtype.VarcharOID:
			out[i] = func(b []byte, text *textArena) any { return text.str(b) } // one form in text and binary
		case f.Format != pgx.BinaryFormatCode:
			return nil
		case f.DataTypeOID == pgtype.Int8OID:
			out[i] = func(b []byte, _ *textArena) any {
				if len(b) != 8 {
					return b // not the declared type: NormalizeQueryValue refuses it
				}
				return int64(binary.BigEndian.Uint64(b))
			}
		case f.DataTypeOID == pgtype.BoolOID:
			out[i] = func(b []byte, _ *textArena) any {
				if len(b) != 1 {
					return b
				}
				return b[0] != 0
			}
		case f.DataTypeOID == pgtype.Float8OID:
			out[i] = func(b []byte, _ *textArena) any {
				if len(b) != 8 {
					return b
				}
				return math.Float64frombits(binary.BigEndian.Uint64(b))
			}
		default:
			return nil
		}
	}
	return out
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
