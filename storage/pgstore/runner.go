package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/syncnode/syncnode/storage/internal/sqlexec"
)

// runner runs the statements of the dialect-neutral parts (gatecore,
// segcore): writes in transactions, reads on the pool.
type runner struct{ s *Store }

func (r runner) Write(ctx context.Context, fn func(sqlexec.Conn) error) error {
	return pgx.BeginFunc(ctx, r.s.pool, func(tx pgx.Tx) error { return fn(poolConn{tx}) })
}

func (r runner) Read(ctx context.Context, fn func(sqlexec.Conn) error) error {
	return fn(poolConn{r.s.pool})
}

func (r runner) Snapshot(ctx context.Context, fn func(sqlexec.Conn) error) error {
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	return pgx.BeginTxFunc(ctx, r.s.pool, opts, func(tx pgx.Tx) error { return fn(poolConn{tx}) })
}

// poolConn is a pgx.Tx or the pool as a sqlexec.Conn.
type poolConn struct {
	q interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}
}

func (c poolConn) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (c poolConn) QueryRow(ctx context.Context, sql string, args []any, dest ...any) (bool, error) {
	err := c.q.QueryRow(ctx, sql, args...).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (c poolConn) Query(ctx context.Context, sql string, args []any, row func(scan func(...any) error) error) error {
	rows, err := c.q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	return eachRow(rows, row)
}

// txConn is a tx as a sqlexec.Conn: statements run after its queued
// ones.
type txConn struct{ t *tx }

func (c txConn) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := c.t.exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (c txConn) QueryRow(ctx context.Context, sql string, args []any, dest ...any) (bool, error) {
	return c.t.queryRow(ctx, sql, args, dest...)
}

func (c txConn) Query(ctx context.Context, sql string, args []any, row func(scan func(...any) error) error) error {
	return c.t.query(ctx, sql, args, func(rows pgx.Rows) error { return eachRow(rows, row) })
}

func eachRow(rows pgx.Rows, row func(scan func(...any) error) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}
