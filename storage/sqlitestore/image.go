package sqlitestore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/url"
	"os"
	"unsafe"

	"github.com/syncnode/syncnode/sqliteimage"
	"github.com/syncnode/syncnode/ssp2"
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

// imageDSN opens a scratch file: no journal, no syncs, one exclusive
// connection, 16 KiB pages (fewer b-tree balances), and a page cache
// large enough to hold a big image until it is written out at commit.
func imageDSN(path string) string {
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath()}
	q := url.Values{}
	q.Add("_pragma", "page_size(16384)")
	q.Add("_pragma", "journal_mode(OFF)")
	q.Add("_pragma", "synchronous(OFF)")
	q.Add("_pragma", "locking_mode(EXCLUSIVE)")
	q.Add("_pragma", "temp_store(MEMORY)")
	q.Add("_pragma", "cache_size(-65536)")
	u.RawQuery = q.Encode()
	return u.String()
}

// buildImage writes the image at path through the driver directly (conn):
// the statements run under a context that is never cancelled, so the
// driver installs no progress handler, and ctx is checked between
// statements instead. Reading the rows and inserting them overlap: this
// goroutine fills one statement's parameters while a writer goroutine
// executes the previous statement, so a build takes about the longer of
// the two rather than their sum.
func buildImage(ctx context.Context, path string, l sqliteimage.Layout, m sqliteimage.Meta, rows iter.Seq2[sqliteimage.Row, error]) (n int64, err error) {
	c, err := connect(ctx, imageDSN(path))
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, c.close()) }()
	if err := c.execOnce(ctx, "BEGIN"); err != nil {
		return 0, err
	}
	for _, ddl := range []string{l.CreateData(), sqliteimage.CreateMeta()} {
		if err := c.execOnce(ctx, ddl); err != nil {
			return 0, err
		}
	}
	n, err = insertRows(ctx, c, l, rows)
	if err != nil {
		return n, err
	}
	m.Format, m.RowCount = sqliteimage.Format, n
	if err := c.execOnce(ctx, sqliteimage.InsertMeta(), m.Format, m.Table, int64(m.SchemaVersion), m.AsOfCommitSeq, m.ScopeDigest, m.RowCount); err != nil {
		return n, err
	}
	return n, c.execOnce(ctx, "COMMIT")
}

// insertRows inserts rows in statements of imageBatch rows, through two
// binders that pass between this goroutine (filling) and a writer
// goroutine (executing on c, which nothing else touches meanwhile).
func insertRows(ctx context.Context, c *conn, l sqliteimage.Layout, rows iter.Seq2[sqliteimage.Row, error]) (n int64, err error) {
	free := make(chan *imageBinder, 2)
	free <- newImageBinder(l)
	free <- newImageBinder(l)
	work := make(chan *imageBinder)
	done := make(chan error, 1)
	go func() {
		var werr error
		for b := range work {
			if werr == nil {
				werr = ctx.Err()
			}
			if werr == nil {
				var s *stmt
				if s, werr = c.stmt(ctx, l.InsertData(b.rows)); werr == nil {
					_, werr = s.ex.ExecContext(stmtCtx, b.finish())
				}
			}
			b.reset()
			free <- b
		}
		done <- werr
	}()
	b := <-free
	for r, rerr := range rows {
		if rerr != nil {
			err = rerr
			break
		}
		if len(r.Values) != len(l.Columns) {
			err = fmt.Errorf("row of %d values for %d columns", len(r.Values), len(l.Columns))
			break
		}
		b.add(r)
		n++
		if b.rows == imageBatch {
			work <- b
			b = <-free
		}
	}
	if err == nil && b.rows > 0 {
		work <- b
	}
	close(work)
	return n, errors.Join(err, <-done)
}

// imageBinder collects one statement's parameters. Text and blob values
// are copied into one arena per statement and bound as views of it at
// the end (the driver copies them into SQLite's memory while binding), so
// a row's values need to stay valid only until the next row is read, and
// a statement costs no allocation per value but the boxing of numbers.
type imageBinder struct {
	l     sqliteimage.Layout
	args  []driver.NamedValue
	arena []byte
	spans []span // the text and blob values, bound by finish
	rows  int
}

type span struct {
	arg        int
	start, end int
	blob       bool
}

func newImageBinder(l sqliteimage.Layout) *imageBinder {
	return &imageBinder{
		l:     l,
		args:  make([]driver.NamedValue, 0, imageBatch*(len(l.Columns)+1)),
		arena: make([]byte, 0, 64<<10), // never nil: an empty blob is not NULL
	}
}

// add appends one row's parameters, its values as sqliteimage.Arg gives
// them and the version last.
func (b *imageBinder) add(r sqliteimage.Row) {
	for i, col := range b.l.Columns {
		v := &r.Values[i]
		arg := driver.NamedValue{Ordinal: len(b.args) + 1}
		switch {
		case v.Null:
		case col.Type == ssp2.TypeInteger:
			arg.Value = v.Int
		case col.Type == ssp2.TypeFloat:
			arg.Value = v.Float
		case col.Type == ssp2.TypeBoolean:
			arg.Value = sqliteimage.Arg(col.Type, *v)
		default:
			start := len(b.arena)
			b.arena = append(b.arena, v.Bytes...)
			b.spans = append(b.spans, span{arg: len(b.args), start: start, end: len(b.arena),
				blob: col.Type == ssp2.TypeBytes || col.Type == ssp2.TypeCrdt})
		}
		b.args = append(b.args, arg)
	}
	b.args = append(b.args, driver.NamedValue{Ordinal: len(b.args) + 1, Value: r.Version})
	b.rows++
}

// finish binds the text and blob values to the arena, now that it no
// longer grows, and returns the statement's parameters.
func (b *imageBinder) finish() []driver.NamedValue {
	for _, s := range b.spans {
		switch {
		case s.blob:
			b.args[s.arg].Value = b.arena[s.start:s.end:s.end]
		case s.end == s.start:
			b.args[s.arg].Value = ""
		default:
			b.args[s.arg].Value = unsafe.String(&b.arena[s.start], s.end-s.start)
		}
	}
	return b.args
}

func (b *imageBinder) reset() {
	b.args, b.arena, b.spans, b.rows = b.args[:0], b.arena[:0], b.spans[:0], 0
}
