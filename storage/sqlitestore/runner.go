package sqlitestore

import (
	"context"

	"github.com/syncnode/syncnode/storage/internal/sqlexec"
)

// runner runs the statements of the dialect-neutral parts (gatecore,
// segcore): writes as members of the writer's group transactions, reads
// on reader connections.
type runner struct{ s *Store }

func (r runner) Write(ctx context.Context, fn func(sqlexec.Conn) error) error {
	return r.s.write(ctx, func(c *conn) error { return fn(sqlConn{c}) })
}

func (r runner) Read(ctx context.Context, fn func(sqlexec.Conn) error) error {
	return r.s.withReader(ctx, func(c *conn) error { return fn(sqlConn{c}) })
}

func (r runner) Snapshot(ctx context.Context, fn func(sqlexec.Conn) error) error {
	return r.s.withReader(ctx, func(c *conn) error {
		return readTx(ctx, c, func() error { return fn(sqlConn{c}) })
	})
}

// sqlConn is a connection as a sqlexec.Conn.
type sqlConn struct{ c *conn }

func (c sqlConn) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	return c.c.exec(ctx, q, args...)
}

func (c sqlConn) QueryRow(ctx context.Context, q string, args []any, dest ...any) (bool, error) {
	return c.c.queryRow(ctx, q, args, dest...)
}

func (c sqlConn) Query(ctx context.Context, q string, args []any, row func(scan func(...any) error) error) error {
	r, err := c.c.query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer r.Close()
	for r.Next() {
		if err := row(r.Scan); err != nil {
			return err
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	return r.Close()
}
