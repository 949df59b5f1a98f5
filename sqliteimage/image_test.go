package sqliteimage_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/syncnode/syncnode/sqliteimage"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

var textPK = sqliteimage.Layout{Table: "tasks", PK: 0, Columns: []ssp2.Column{
	{Name: "id", Type: ssp2.TypeString},
	{Name: "n", Type: ssp2.TypeInteger},
	{Name: "score", Type: ssp2.TypeFloat, Nullable: true},
	{Name: "done", Type: ssp2.TypeBoolean},
	{Name: "meta", Type: ssp2.TypeJSON, Nullable: true},
	{Name: "blob", Type: ssp2.TypeBytes, Nullable: true},
	{Name: "title", Type: ssp2.TypeString, Nullable: true},
}}

var intPK = sqliteimage.Layout{Table: "items", PK: 1, Columns: []ssp2.Column{
	{Name: "title", Type: ssp2.TypeString},
	{Name: "id", Type: ssp2.TypeInteger},
}}

func textRow(i int) sqliteimage.Row {
	v := []ssp2.Value{
		{Bytes: fmt.Appendf(nil, "row-%06d", i)},
		{Int: int64(i) - 500},
		{Float: float64(i) / 4},
		{Bool: i%2 == 0},
		{Bytes: fmt.Appendf(nil, `{"i":%d}`, i)},
		{Bytes: []byte{byte(i), 0, byte(i >> 8)}},
		{Bytes: []byte(strings.Repeat("x", i%7*1500))}, // some rows overflow their page
	}
	switch i % 5 {
	case 1:
		v[2], v[4], v[5], v[6] = ssp2.Value{Null: true}, ssp2.Value{Null: true}, ssp2.Value{Null: true}, ssp2.Value{Null: true}
	case 2:
		v[5] = ssp2.Value{Bytes: nil} // an empty blob
		v[2] = ssp2.Value{Float: 3}   // integral: stored as an integer by REAL affinity
	}
	return sqliteimage.Row{Version: int64(i + 1), Values: v}
}

func seq(n int, row func(int) sqliteimage.Row) iter.Seq2[sqliteimage.Row, error] {
	return func(yield func(sqliteimage.Row, error) bool) {
		for i := range n {
			if !yield(row(i), nil) {
				return
			}
		}
	}
}

func build(t testing.TB, l sqliteimage.Layout, n int, row func(int) sqliteimage.Row) ([]byte, sqliteimage.Meta) {
	t.Helper()
	m := sqliteimage.Meta{Table: l.Table, SchemaVersion: 3, AsOfCommitSeq: 42, ScopeDigest: "d1"}
	var buf bytes.Buffer
	got, err := sqlitestore.WriteImage(context.Background(), &buf, t.TempDir(), l, m, seq(n, row))
	if err != nil {
		t.Fatal(err)
	}
	if got != int64(n) {
		t.Fatalf("wrote %d rows, want %d", got, n)
	}
	m.Format, m.RowCount = 1, int64(n)
	return buf.Bytes(), m
}

// opened opens an image and checks it against l and m.
func opened(t *testing.T, data []byte, l sqliteimage.Layout, m sqliteimage.Meta) *sqliteimage.Image {
	t.Helper()
	im, err := sqliteimage.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.Check(l, m); err != nil {
		t.Fatal(err)
	}
	return im
}

func same(a, b ssp2.Value) bool {
	return a.Null == b.Null && a.Int == b.Int && a.Float == b.Float && a.Bool == b.Bool && bytes.Equal(a.Bytes, b.Bytes)
}

func TestRoundTrip(t *testing.T) {
	const n = 3000 // interior pages, overflow chains
	data, m := build(t, textPK, n, textRow)
	im := opened(t, data, textPK, m)
	seen := 0
	count, err := im.Rows(textPK, func(version int64, vals []ssp2.Value) error {
		i := seen
		want := textRow(i)
		if version != want.Version {
			return fmt.Errorf("row %d: version %d, want %d", i, version, want.Version)
		}
		for c := range vals {
			if !same(vals[c], want.Values[c]) {
				return fmt.Errorf("row %d column %s: %+v, want %+v", i, textPK.Columns[c].Name, vals[c], want.Values[c])
			}
		}
		seen++
		return nil
	})
	if err != nil || count != n || seen != n {
		t.Fatalf("rows: %d, %d, %v", count, seen, err)
	}

	// The SQLite engine agrees the file is sound and holds the same rows.
	path := filepath.Join(t.TempDir(), "image.sqlite")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ok string
	var rows, meta int64
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check: %q, %v", ok, err)
	}
	if err := db.QueryRow(`SELECT count(*), (SELECT rowCount FROM _syncular_segment) FROM tasks`).Scan(&rows, &meta); err != nil || rows != n || meta != n {
		t.Fatalf("engine reads %d rows, meta %d, %v", rows, meta, err)
	}
}

// TestSplit: the parts of a Split, read one after another (and read
// concurrently), deliver exactly Rows' rows in Rows' order.
func TestSplit(t *testing.T) {
	data, m := build(t, textPK, 3000, textRow)
	im := opened(t, data, textPK, m)
	for _, n := range []int{1, 2, 3, 7, 1000} {
		parts, err := im.Split(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) < 1 || len(parts) > n {
			t.Fatalf("Split(%d) made %d parts", n, len(parts))
		}
		got := make([][]int64, len(parts)) // each part's versions, in order
		errs := make([]error, len(parts))
		var wg sync.WaitGroup
		for i, p := range parts {
			wg.Go(func() {
				_, errs[i] = p.Rows(textPK, func(version int64, vals []ssp2.Value) error {
					got[i] = append(got[i], version)
					return nil
				})
			})
		}
		wg.Wait()
		var all []int64
		for i := range parts {
			if errs[i] != nil {
				t.Fatalf("Split(%d) part %d: %v", n, i, errs[i])
			}
			all = append(all, got[i]...)
		}
		if len(all) != 3000 {
			t.Fatalf("Split(%d): %d rows", n, len(all))
		}
		for i, v := range all {
			if v != textRow(i).Version {
				t.Fatalf("Split(%d): row %d has version %d, want %d", n, i, v, textRow(i).Version)
			}
		}
	}

	// A child page the root names twice is refused across parts too.
	path := filepath.Join(t.TempDir(), "image.sqlite")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var root, pageSize int
	err = db.QueryRow(`SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_schema WHERE name = 'tasks'`).Scan(&root, &pageSize)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(data)
	p := bad[(root-1)*pageSize : root*pageSize]
	if p[0] != 0x05 || binary.BigEndian.Uint16(p[3:]) < 2 {
		t.Fatalf("root page %d is not an interior page of two or more cells", root)
	}
	c0, c1 := binary.BigEndian.Uint16(p[12:]), binary.BigEndian.Uint16(p[14:])
	copy(p[c1:c1+4], p[c0:c0+4])
	im, err = sqliteimage.Open(bad)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := im.Split(2)
	if err == nil {
		for _, part := range parts {
			if _, err = part.Rows(textPK, func(int64, []ssp2.Value) error { return nil }); err != nil {
				break
			}
		}
	}
	if ssp2.CodeOf(err) != ssp2.CodeInvalidRequest || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a page named twice: %v", err)
	}
}

func TestIntegerPrimaryKeyIsTheRowid(t *testing.T) {
	row := func(i int) sqliteimage.Row {
		return sqliteimage.Row{Version: 1, Values: []ssp2.Value{{Bytes: []byte("t")}, {Int: int64(i*7 - 100)}}}
	}
	data, m := build(t, intPK, 500, row)
	im := opened(t, data, intPK, m)
	want := int64(-100)
	if _, err := im.Rows(intPK, func(_ int64, vals []ssp2.Value) error {
		if vals[1].Null || vals[1].Int != want {
			return fmt.Errorf("id %+v, want %d", vals[1], want)
		}
		want += 7
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestRejects(t *testing.T) {
	data, m := build(t, textPK, 50, textRow)
	code := func(err error) ssp2.Code { return ssp2.CodeOf(err) }
	if _, err := sqliteimage.Open(data[:len(data)-1]); code(err) != ssp2.CodeInvalidRequest {
		t.Errorf("truncated: %v", err)
	}
	if _, err := sqliteimage.Open([]byte("SSG2 not a database")); code(err) != ssp2.CodeInvalidRequest {
		t.Errorf("not a database: %v", err)
	}
	im, err := sqliteimage.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []sqliteimage.Meta{
		{Format: 2, Table: m.Table, SchemaVersion: m.SchemaVersion, AsOfCommitSeq: m.AsOfCommitSeq, ScopeDigest: m.ScopeDigest, RowCount: m.RowCount},
		{Format: 1, Table: m.Table, SchemaVersion: m.SchemaVersion, AsOfCommitSeq: m.AsOfCommitSeq, ScopeDigest: "other", RowCount: m.RowCount},
		{Format: 1, Table: m.Table, SchemaVersion: m.SchemaVersion, AsOfCommitSeq: m.AsOfCommitSeq, ScopeDigest: m.ScopeDigest, RowCount: m.RowCount + 1},
	} {
		if err := im.Check(textPK, bad); code(err) != ssp2.CodeInvalidRequest {
			t.Errorf("metadata %s: %v", bad, err)
		}
	}
	other := textPK
	other.Columns = append([]ssp2.Column(nil), textPK.Columns...)
	other.Columns[1], other.Columns[2] = other.Columns[2], other.Columns[1]
	if err := im.Check(other, m); code(err) != ssp2.CodeSchemaMismatch {
		t.Errorf("column order: %v", err)
	}

	// A third table, a second metadata row: the engine writes them, the
	// reader refuses them.
	path := filepath.Join(t.TempDir(), "x.sqlite")
	for name, stmt := range map[string]string{
		"extra table":   "CREATE TABLE extra (x)",
		"two meta rows": "INSERT INTO _syncular_segment SELECT * FROM _syncular_segment",
		"no meta row":   "DELETE FROM _syncular_segment",
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = db.Exec(stmt)
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		changed, _ := os.ReadFile(path)
		if _, err := sqliteimage.Open(changed); code(err) != ssp2.CodeInvalidRequest {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzOpen: corrupt images never panic or loop; every refusal is typed.
func FuzzOpen(f *testing.F) {
	small := func(i int) sqliteimage.Row {
		r := textRow(i)
		r.Values[6] = ssp2.Value{Bytes: []byte(strings.Repeat("y", i*700))} // row 7 overflows a page
		return r
	}
	data, m := build(f, textPK, 8, small)
	f.Add([]byte(nil), 0, byte(0))
	f.Add([]byte(nil), 100, byte(0xff))
	f.Add([]byte(nil), 4096+8, byte(0x05))
	f.Fuzz(func(t *testing.T, base []byte, at int, b byte) {
		img := bytes.Clone(data)
		if len(base) > 0 && len(base) < 1<<16 {
			img = base
		} else if at >= 0 && at < len(img) {
			img[at] ^= b
		}
		im, err := sqliteimage.Open(img)
		if err != nil {
			if ssp2.CodeOf(err) != ssp2.CodeInvalidRequest {
				t.Fatalf("untyped refusal: %v", err)
			}
			return
		}
		if err := im.Check(textPK, m); err != nil {
			return
		}
		if _, err := im.Rows(textPK, func(int64, []ssp2.Value) error { return nil }); err != nil && ssp2.CodeOf(err) != ssp2.CodeInvalidRequest {
			t.Fatalf("untyped row refusal: %v", err)
		}
		parts, err := im.Split(3)
		if err != nil {
			if ssp2.CodeOf(err) != ssp2.CodeInvalidRequest {
				t.Fatalf("untyped split refusal: %v", err)
			}
			return
		}
		for _, p := range parts {
			if _, err := p.Rows(textPK, func(int64, []ssp2.Value) error { return nil }); err != nil && ssp2.CodeOf(err) != ssp2.CodeInvalidRequest {
				t.Fatalf("untyped part refusal: %v", err)
			}
		}
	})
}

var tasks = sqliteimage.Layout{Table: "tasks", PK: 0, Columns: []ssp2.Column{
	{Name: "id", Type: ssp2.TypeString},
	{Name: "project_id", Type: ssp2.TypeString},
	{Name: "title", Type: ssp2.TypeString},
	{Name: "done", Type: ssp2.TypeBoolean},
	{Name: "priority", Type: ssp2.TypeInteger, Nullable: true},
	{Name: "updated_at_ms", Type: ssp2.TypeInteger, Nullable: true},
}}

func taskRow(i int) sqliteimage.Row {
	return sqliteimage.Row{Version: int64(i%9 + 1), Values: []ssp2.Value{
		{Bytes: fmt.Appendf(nil, "task-%07d", i)}, {Bytes: []byte("p1")}, {Bytes: fmt.Appendf(nil, "Task number %d", i)},
		{Bool: i%3 == 0}, {Int: int64(i % 5)}, {Int: 1_700_000_000_000 + int64(i)},
	}}
}

// BenchmarkWriteImage100k is the SQLite half of a cold image build: 100k
// task rows into a fresh image file.
func BenchmarkWriteImage100k(b *testing.B) {
	rows := make([]sqliteimage.Row, 100_000)
	for i := range rows {
		rows[i] = taskRow(i)
	}
	cpu0 := cpuTime()
	for b.Loop() {
		build(b, tasks, len(rows), func(i int) sqliteimage.Row { return rows[i] })
	}
	b.ReportMetric(float64(100_000*b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReadImage100k is the client half: open, check and iterate a
// 100k-row image.
func BenchmarkReadImage100k(b *testing.B) {
	data, m := build(b, tasks, 100_000, taskRow)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		im, err := sqliteimage.Open(data)
		if err != nil {
			b.Fatal(err)
		}
		if err := im.Check(tasks, m); err != nil {
			b.Fatal(err)
		}
		if n, err := im.Rows(tasks, func(int64, []ssp2.Value) error { return nil }); err != nil || n != 100_000 {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(100_000*b.N)/b.Elapsed().Seconds(), "rows/s")
}
