package sqlitestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/blobcore"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
	"github.com/syncnode/syncnode/storage/internal/schemaplan"
)

// installed is the schema EnsureSchema last installed, with the SQL of
// each application table built once.
type installed struct {
	schema *schema.Schema
	tables map[string]*tableSQL
	texts  schemaplan.Statements // registered queries' statement texts
}

type tableSQL struct {
	t *schema.Table
	// upsert inserts, or updates a row whose scope columns are unchanged;
	// rescope updates a row whose scope columns changed. Leaving the scope
	// columns out of upsert's SET keeps SQLite from rewriting their index
	// entries on every update.
	upsert  string
	rescope string
	// setVersion stores an explicit server version (RowWrite.Version).
	setVersion string
	get        string
	delete     string
	// scanHead is the SELECT … WHERE _sync_partition = ? prefix of scans.
	scanHead string
	// byColumn holds, per column, the keyset page of rows holding one
	// value of it (RowScanByColumn).
	byColumn []string
	// blobRefs: the table has blob_ref columns, so its writes maintain
	// the blob reference index.
	blobRefs bool
}

func newInstalled(sc *schema.Schema) *installed {
	in := &installed{schema: sc, tables: make(map[string]*tableSQL, len(sc.Tables))}
	for _, t := range sc.Tables {
		in.tables[t.Name] = buildTableSQL(t)
	}
	return in
}

func buildTableSQL(t *schema.Table) *tableSQL {
	name := quote(t.Name)
	cols := []string{quote(schemaplan.ColPartition), quote(schemaplan.ColRowID), quote(schemaplan.ColServerVersion),
		quote(schemaplan.ColScopes), quote(schemaplan.ColPayload)}
	// Parameters: ?1 partition, ?2 row id, ?3 scopes, ?4 payload, then
	// one per schema column, then the column versions.
	vals := []string{"?1", "?2", "1", "?3", "?4"}
	version := fmt.Sprintf("%[1]s = %[2]s.%[1]s + 1", quote(schemaplan.ColServerVersion), name)
	cvParam := "?" + strconv.Itoa(len(t.Columns)+5)
	sets := []string{version, quote(schemaplan.ColScopes) + " = ?3", quote(schemaplan.ColPayload) + " = ?4",
		quote(schemaplan.ColColumnVersions) + " = " + cvParam}
	allSets := slices.Clone(sets)
	var same []string
	for i, c := range t.Columns {
		p := "?" + strconv.Itoa(i+5)
		cols = append(cols, quote(c.Name))
		vals = append(vals, p)
		allSets = append(allSets, quote(c.Name)+" = "+p)
		if t.IsScopeColumn(i) {
			same = append(same, fmt.Sprintf("%s.%s IS %s", name, quote(c.Name), p))
		} else {
			sets = append(sets, quote(c.Name)+" = "+p)
		}
	}
	cols = append(cols, quote(schemaplan.ColColumnVersions))
	vals = append(vals, cvParam)
	key := fmt.Sprintf("%s = ? AND %s = ?", quote(schemaplan.ColPartition), quote(schemaplan.ColRowID))
	byColumn := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		byColumn[i] = fmt.Sprintf(`SELECT %s, %s, %s, %s, %s FROM %s WHERE %s = ? AND %s = ? AND %s > ? ORDER BY %s LIMIT +?`,
			quote(schemaplan.ColRowID), quote(schemaplan.ColServerVersion), quote(schemaplan.ColScopes),
			quote(schemaplan.ColPayload), quote(schemaplan.ColColumnVersions), name,
			quote(schemaplan.ColPartition), quote(c.Name), quote(schemaplan.ColRowID), quote(schemaplan.ColRowID))
	}
	return &tableSQL{
		blobRefs: blobcore.HasRefs(t),
		byColumn: byColumn,
		t:        t,
		upsert: fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s, %s) DO UPDATE SET %s WHERE %s RETURNING %s",
			name, strings.Join(cols, ", "), strings.Join(vals, ", "),
			quote(schemaplan.ColPartition), quote(schemaplan.ColRowID), strings.Join(sets, ", "),
			strings.Join(same, " AND "), unnamed(quote(schemaplan.ColServerVersion))),
		rescope: fmt.Sprintf("UPDATE %s SET %s WHERE %s = ?1 AND %s = ?2 RETURNING %s", name, strings.Join(allSets, ", "),
			quote(schemaplan.ColPartition), quote(schemaplan.ColRowID), unnamed(quote(schemaplan.ColServerVersion))),
		setVersion: fmt.Sprintf("UPDATE %s SET %s = ? WHERE %s = ? AND %s = ?", name, quote(schemaplan.ColServerVersion),
			quote(schemaplan.ColPartition), quote(schemaplan.ColRowID)),
		get: fmt.Sprintf("SELECT %s FROM %s WHERE %s", unnamed(quote(schemaplan.ColServerVersion),
			quote(schemaplan.ColScopes), quote(schemaplan.ColPayload), quote(schemaplan.ColColumnVersions)), name, key),
		delete: fmt.Sprintf("DELETE FROM %s WHERE %s", name, key),
		scanHead: fmt.Sprintf("SELECT %s, %s, %s FROM %s WHERE %s = ?", quote(schemaplan.ColRowID),
			quote(schemaplan.ColServerVersion), quote(schemaplan.ColPayload), name, quote(schemaplan.ColPartition)),
	}
}

// table resolves an application table of the installed schema.
func (t *tx) table(op, name string) (*tableSQL, error) {
	if t.inst == nil {
		return nil, schemaplan.TableError(op, name, false)
	}
	if ts, ok := t.inst.tables[name]; ok {
		return ts, nil
	}
	return nil, schemaplan.TableError(op, name, true)
}

// RowGet implements storage.ReadTx.
func (t *tx) RowGet(ctx context.Context, partition, table, rowID string) (storage.Row, bool, error) {
	if err := t.check(); err != nil {
		return storage.Row{}, false, err
	}
	ts, err := t.table("get row", table)
	if err != nil {
		return storage.Row{}, false, err
	}
	r := storage.Row{RowID: rowID}
	var scopes []byte
	ok, err := t.c.queryRow(ctx, ts.get, []any{partition, rowID}, &r.ServerVersion, &scopes, &r.Payload, &r.ColumnVersions)
	if err != nil {
		return r, false, t.fail("get row", table, err)
	}
	if !ok {
		return storage.Row{}, false, nil
	}
	if r.Scopes, err = commitlog.ParseScopesJSON(scopes); err != nil {
		return r, false, fmt.Errorf("get row: %w", err)
	}
	return r, true, nil
}

// bindValue converts a typed column value to what the STRICT column
// stores (schemaplan.BindValue): a boolean as INTEGER 0 or 1.
func bindValue(typ ssp2.ColumnType, v ssp2.Value) any {
	return schemaplan.BindValue(typ, v, int64(0), int64(1))
}

// RowUpsert implements storage.Tx.
func (t *tx) RowUpsert(ctx context.Context, table string, r storage.RowWrite) (int64, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	ts, err := t.table("upsert row", table)
	if err != nil {
		return 0, err
	}
	if len(r.Values) != len(ts.t.Columns) {
		return 0, fmt.Errorf("upsert row: %d values for %d columns of table %s", len(r.Values), len(ts.t.Columns), table)
	}
	t.scratch.scopes = commitlog.AppendScopesJSON(t.scratch.scopes[:0], r.Scopes)
	payload := r.Payload
	if payload == nil {
		payload = []byte{}
	}
	args := append(t.scratch.args[:0], t.locked.ID, r.RowID, string(t.scratch.scopes), payload)
	for i, c := range ts.t.Columns {
		args = append(args, bindValue(c.Type, r.Values[i]))
	}
	var versions any // NULL
	if r.ColumnVersions != nil {
		versions = r.ColumnVersions
	}
	args = append(args, versions)
	t.scratch.args = args
	var version int64
	ok, err := t.c.queryRow(ctx, ts.upsert, args, &version)
	if err == nil && !ok {
		// The row exists with other scope values.
		ok, err = t.c.queryRow(ctx, ts.rescope, args, &version)
		if err == nil && !ok {
			err = errors.New("row vanished between upsert and rescope")
		}
	}
	if err != nil {
		return 0, t.fail("upsert row", table, err)
	}
	if version == 1 { // an insert: the row is no longer deleted
		if _, err := t.c.exec(ctx, qClearTombstone, t.locked.ID, table, r.RowID); err != nil {
			return 0, t.fail("upsert row", table, err)
		}
	}
	if r.Version > 0 && r.Version != version {
		if _, err := t.c.exec(ctx, ts.setVersion, r.Version, t.locked.ID, r.RowID); err != nil {
			return 0, t.fail("upsert row", table, err)
		}
		version = r.Version
	}
	if ts.blobRefs {
		t.scratch.blobIDs = blobcore.RefIDs(ts.t, r.Values, t.scratch.blobIDs[:0])
		if err := t.writeBlobRefs(ctx, ts, r.RowID, t.scratch.blobIDs, t.scratch.scopes); err != nil {
			return 0, t.fail("upsert row", table, err)
		}
	}
	return version, nil
}

const (
	qClearTombstone = `DELETE FROM sync_tombstones WHERE partition = ? AND tbl = ? AND row_id = ?`
	qGetTombstone   = `SELECT commit_seq FROM sync_tombstones WHERE partition = ? AND tbl = ? AND row_id = ?`
)

// TombstoneGet implements storage.Tx.
func (t *tx) TombstoneGet(ctx context.Context, table, rowID string) (int64, bool, error) {
	if err := t.check(); err != nil {
		return 0, false, err
	}
	if _, err := t.table("get tombstone", table); err != nil {
		return 0, false, err
	}
	var seq int64
	ok, err := t.c.queryRow(ctx, qGetTombstone, []any{t.locked.ID, table, rowID}, &seq)
	if err != nil {
		return 0, false, t.fail("get tombstone", table, err)
	}
	return seq, ok, nil
}

// RowScanByColumn implements storage.ReadTx: an equality on the typed
// column, which its reference or declared index serves in row id order.
func (t *tx) RowScanByColumn(ctx context.Context, p storage.ColumnScanParams) ([]storage.Row, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	ts, err := t.table("scan rows by column", p.Table)
	if err != nil {
		return nil, err
	}
	col, err := schemaplan.ColumnScan(ts.t, &p)
	if err != nil {
		return nil, err
	}
	rows, err := t.c.query(ctx, ts.byColumn[col], p.Partition, bindValue(ts.t.Columns[col].Type, p.Value), p.AfterRowID, p.Limit)
	if err != nil {
		return nil, t.fail("scan rows by column", p.Table, err)
	}
	defer rows.Close()
	var out []storage.Row
	for rows.Next() {
		var r storage.Row
		var scopes []byte
		if err := rows.Scan(&r.RowID, &r.ServerVersion, &scopes, &r.Payload, &r.ColumnVersions); err != nil {
			return nil, t.fail("scan rows by column", p.Table, err)
		}
		if r.Scopes, err = commitlog.ParseScopesJSON(scopes); err != nil {
			return nil, fmt.Errorf("scan rows by column: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, t.fail("scan rows by column", p.Table, err)
	}
	return out, nil
}

// RowDelete implements storage.Tx.
func (t *tx) RowDelete(ctx context.Context, table, rowID string) (bool, error) {
	if err := t.check(); err != nil {
		return false, err
	}
	ts, err := t.table("delete row", table)
	if err != nil {
		return false, err
	}
	n, err := t.c.exec(ctx, ts.delete, t.locked.ID, rowID)
	if err != nil {
		return false, t.fail("delete row", table, err)
	}
	if ts.blobRefs && n > 0 {
		if _, err := t.c.exec(ctx, qBlobRefsDelete, t.locked.ID, table, rowID); err != nil {
			return false, t.fail("delete row", table, err)
		}
	}
	return n > 0, nil
}

// RowScan implements storage.ReadTx. Each filter runs on the typed scope
// column: one value is an equality the column's scope index serves in row
// id order; several values are an IN over json_each of a JSON array, so
// one statement serves any list length.
func (t *tx) RowScan(ctx context.Context, p storage.ScanParams) ([]storage.Row, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	ts, err := t.table("scan rows", p.Table)
	if err != nil {
		return nil, err
	}
	filters, none, err := schemaplan.ScanFilters(ts.t, &p)
	if err != nil || none {
		return nil, err
	}
	var q strings.Builder
	q.WriteString(ts.scanHead)
	args := []any{p.Partition}
	for i := range filters {
		f := &filters[i]
		q.WriteString(" AND " + quote(f.Column))
		if f.Len() == 1 {
			q.WriteString(" = ?")
			switch {
			case f.Ints != nil:
				args = append(args, f.Ints[0])
			case f.Bools != nil:
				args = append(args, bindValue(ssp2.TypeBoolean, ssp2.Value{Bool: f.Bools[0]}))
			default:
				args = append(args, f.Strings[0])
			}
			continue
		}
		q.WriteString(" IN (SELECT value FROM json_each(?))")
		var list any = f.Strings
		switch {
		case f.Ints != nil:
			list = f.Ints
		case f.Bools != nil:
			ints := make([]int64, len(f.Bools))
			for j, b := range f.Bools {
				if b {
					ints[j] = 1
				}
			}
			list = ints
		}
		b, err := json.Marshal(list)
		if err != nil {
			return nil, fmt.Errorf("scan rows: %w", err)
		}
		args = append(args, string(b))
	}
	if p.AfterRowID != "" {
		q.WriteString(" AND " + quote(schemaplan.ColRowID) + " > ?")
		args = append(args, p.AfterRowID)
	}
	q.WriteString(" ORDER BY " + quote(schemaplan.ColRowID) + " LIMIT +?")
	args = append(args, p.Limit)

	rows, err := t.c.query(ctx, q.String(), args...)
	if err != nil {
		return nil, t.fail("scan rows", p.Table, err)
	}
	defer rows.Close()
	out := make([]storage.Row, 0, min(p.Limit, 1024))
	for rows.Next() {
		var r storage.Row
		if err := rows.Scan(&r.RowID, &r.ServerVersion, &r.Payload); err != nil {
			return nil, t.fail("scan rows", p.Table, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, t.fail("scan rows", p.Table, err)
	}
	return out, nil
}
