package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/url"
	"os"

	"github.com/syncnode/syncnode/sqliteimage"
)

// imageBatch is how many rows one INSERT statement carries: SQLite binds
// at most 32,766 parameters, and a wide statement amortizes the per-call
// cost of the driver.
const imageBatch = 1024

// WriteImage writes a SQLite-image segment (SPEC.md §5.3) of layout l to
// w: the data table and the _syncular_segment row holding m, with
// m.RowCount set to the rows written. The database is built in a
// temporary file under dir (the system's temporary directory when
// empty), without a journal, in one transaction, then copied to w and
// removed, so memory stays bounded whatever the table's size. It returns
// the number of rows written; the first error of rows stops it.
func WriteImage(ctx context.Context, w io.Writer, dir string, l sqliteimage.Layout, m sqliteimage.Meta, rows iter.Seq2[sqliteimage.Row, error]) (int64, error) {
	f, err := os.CreateTemp(dir, "syncnode-image-*.sqlite")
	if err != nil {
		return 0, fmt.Errorf("write image: %w", err)
	}
	path := f.Name()
	_ = f.Close()
	defer os.Remove(path)
	n, err := buildImage(ctx, path, l, m, rows)
	if err != nil {
		return n, fmt.Errorf("write image: %w", err)
	}
	f, err = os.Open(path)
	if err != nil {
		return n, fmt.Errorf("write image: %w", err)
	}
	defer f.Close()
	if _, err := io.Copy(w, f); err != nil {
		return n, fmt.Errorf("write image: %w", err)
	}
	return n, nil
}

func buildImage(ctx context.Context, path string, l sqliteimage.Layout, m sqliteimage.Meta, rows iter.Seq2[sqliteimage.Row, error]) (n int64, err error) {
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath()}
	q := url.Values{}
	// A scratch file: no journal, no syncs, one connection, the page
	// cache large enough to hold a big image before it is written out.
	q.Add("_pragma", "page_size(16384)")
	q.Add("_pragma", "journal_mode(OFF)")
	q.Add("_pragma", "synchronous(OFF)")
	q.Add("_pragma", "locking_mode(EXCLUSIVE)")
	q.Add("_pragma", "temp_store(MEMORY)")
	q.Add("_pragma", "cache_size(-65536)")
	u.RawQuery = q.Encode()
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	for _, ddl := range []string{l.CreateData(), sqliteimage.CreateMeta()} {
		if _, err := tx.ExecContext(ctx, ddl); err != nil {
			return 0, err
		}
	}
	full, err := tx.PrepareContext(ctx, l.InsertData(imageBatch))
	if err != nil {
		return 0, err
	}
	defer full.Close()
	width := len(l.Columns) + 1
	args := make([]any, 0, imageBatch*width)
	pending := 0
	flush := func() error {
		if pending == 0 {
			return nil
		}
		var err error
		if pending == imageBatch {
			_, err = full.ExecContext(ctx, args...)
		} else {
			_, err = tx.ExecContext(ctx, l.InsertData(pending), args...)
		}
		args, pending = args[:0], 0
		return err
	}
	for r, err := range rows {
		if err != nil {
			return n, err
		}
		if len(r.Values) != len(l.Columns) {
			return n, fmt.Errorf("row of %d values for %d columns", len(r.Values), len(l.Columns))
		}
		for i, c := range l.Columns {
			args = append(args, sqliteimage.Arg(c.Type, r.Values[i]))
		}
		args = append(args, r.Version)
		n++
		if pending++; pending == imageBatch {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := flush(); err != nil {
		return n, err
	}
	m.Format, m.RowCount = sqliteimage.Format, n
	if _, err := tx.ExecContext(ctx, sqliteimage.InsertMeta(), m.Format, m.Table, m.SchemaVersion, m.AsOfCommitSeq, m.ScopeDigest, m.RowCount); err != nil {
		return n, err
	}
	return n, tx.Commit()
}
