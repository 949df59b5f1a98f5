package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

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
	t      *schema.Table
	upsert string
	get    string
	// getMany reads rows by id ($2, an array) like get.
	getMany string
	delete  string
	// setVersion stores an explicit server version (RowWrite.Version).
	setVersion string
	// scanHead is the SELECT … WHERE _sync_partition = $1 prefix of scans.
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

// buildTableSQL builds a table's statements. PostgreSQL updates a row
// whose indexed values are unchanged without touching its indexes (a HOT
// update), so one upsert serves unchanged and changed scope columns.
func buildTableSQL(t *schema.Table) *tableSQL {
	name := quote(t.Name)
	cols := []string{quote(schemaplan.ColPartition), quote(schemaplan.ColRowID), quote(schemaplan.ColServerVersion),
		quote(schemaplan.ColScopes), quote(schemaplan.ColPayload)}
	vals := []string{"$1", "$2", "1", "$3", "$4"}
	sets := []string{
		fmt.Sprintf("%[1]s = %[2]s.%[1]s + 1", quote(schemaplan.ColServerVersion), name),
		fmt.Sprintf("%[1]s = EXCLUDED.%[1]s", quote(schemaplan.ColScopes)),
		fmt.Sprintf("%[1]s = EXCLUDED.%[1]s", quote(schemaplan.ColPayload)),
	}
	for i, c := range t.Columns {
		cols = append(cols, quote(c.Name))
		vals = append(vals, "$"+strconv.Itoa(i+5))
		sets = append(sets, fmt.Sprintf("%[1]s = EXCLUDED.%[1]s", quote(c.Name)))
	}
	// The column versions come last: $(5 + number of columns).
	cols = append(cols, quote(schemaplan.ColColumnVersions))
	vals = append(vals, "$"+strconv.Itoa(len(t.Columns)+5))
	sets = append(sets, fmt.Sprintf("%[1]s = EXCLUDED.%[1]s", quote(schemaplan.ColColumnVersions)))
	key := fmt.Sprintf("%s = $1 AND %s = $2", quote(schemaplan.ColPartition), quote(schemaplan.ColRowID))
	byColumn := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		byColumn[i] = fmt.Sprintf(`SELECT %s, %s, %s, %s, %s FROM %s WHERE %s = $1 AND %s = $2 AND %s > $3 ORDER BY %s LIMIT $4`,
			quote(schemaplan.ColRowID), quote(schemaplan.ColServerVersion), quote(schemaplan.ColScopes),
			quote(schemaplan.ColPayload), quote(schemaplan.ColColumnVersions), name,
			quote(schemaplan.ColPartition), quote(c.Name), quote(schemaplan.ColRowID), quote(schemaplan.ColRowID))
	}
	return &tableSQL{
		blobRefs: blobcore.HasRefs(t),
		t:        t,
		byColumn: byColumn,
		upsert: fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (%s, %s) DO UPDATE SET %s RETURNING %s",
			name, strings.Join(cols, ", "), strings.Join(vals, ", "),
			quote(schemaplan.ColPartition), quote(schemaplan.ColRowID), strings.Join(sets, ", "),
			quote(schemaplan.ColServerVersion)),
		get: fmt.Sprintf("SELECT %s, %s, %s, %s FROM %s WHERE %s", quote(schemaplan.ColServerVersion),
			quote(schemaplan.ColScopes), quote(schemaplan.ColPayload), quote(schemaplan.ColColumnVersions), name, key),
		getMany: fmt.Sprintf("SELECT %s, %s, %s, %s, %s FROM %s WHERE %s = $1 AND %s = ANY($2::text[])", quote(schemaplan.ColRowID),
			quote(schemaplan.ColServerVersion), quote(schemaplan.ColScopes), quote(schemaplan.ColPayload), quote(schemaplan.ColColumnVersions),
			name, quote(schemaplan.ColPartition), quote(schemaplan.ColRowID)),
		delete:     fmt.Sprintf("DELETE FROM %s WHERE %s", name, key),
		setVersion: fmt.Sprintf("UPDATE %s SET %s = $3 WHERE %s", name, quote(schemaplan.ColServerVersion), key),
		scanHead: fmt.Sprintf("SELECT %s, %s, %s FROM %s WHERE %s = $1", quote(schemaplan.ColRowID),
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
	if a, ok := t.takeAhead(partition, table, rowID); ok {
		t.know(partition, table, rowID, a.row.ServerVersion)
		if !a.ok {
			return storage.Row{}, false, nil
		}
		return a.row, true, nil
	}
	r := storage.Row{RowID: rowID}
	var scopes string
	ok, err := t.queryRow(ctx, ts.get, []any{partition, rowID}, &r.ServerVersion, &scopes, &r.Payload, &r.ColumnVersions)
	if err != nil {
		return r, false, t.fail("get row", table, err)
	}
	t.know(partition, table, rowID, r.ServerVersion)
	if !ok {
		return storage.Row{}, false, nil
	}
	if r.Scopes, err = commitlog.ParseScopesJSON([]byte(scopes)); err != nil {
		return r, false, fmt.Errorf("get row: %w", err)
	}
	return r, true, nil
}

// bindValue converts a typed column value to the Go type pgx encodes
// into the column's type (schemaplan.BindValue): a boolean as bool.
func bindValue(typ ssp2.ColumnType, v ssp2.Value) any {
	return schemaplan.BindValue(typ, v, false, true)
}

// Deferred writes. Under the partition lock every statement whose reply
// a push waits for is a round trip that the partition's next writer waits
// for too. An upsert's reply is the row's new server version, which is
// known in advance when this transaction has read the row (the engine
// reads every row it writes first, mostly from the rows read ahead): the
// old version plus one, or 1 for a new row. So a group member's upsert of
// a known row is queued, and goes with the member's other writes and the
// release of its savepoint, in one round trip. Its error, though, would
// then surface after fn went on as if the write had succeeded (a
// constraint violation is a persisted rejection of the push, decided in
// fn): when a pipeline carrying a deferred write fails, the member is
// rolled back to its savepoint and fn runs again with every write sent at
// once (group.go), so fn meets the error where it made the write.

// know records the server version of a row of the locked partition that
// this transaction read (0: the row does not exist).
func (t *tx) know(partition, table, rowID string, version int64) {
	if t.locked.ID == "" || partition != t.locked.ID {
		return
	}
	if t.known == nil {
		t.known = map[rowKey]int64{}
	}
	t.known[rowKey{table, rowID}] = version
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
	delete(t.ahead, rowKey{table, r.RowID})
	if len(r.Values) != len(ts.t.Columns) {
		return 0, fmt.Errorf("upsert row: %d values for %d columns of table %s", len(r.Values), len(ts.t.Columns), table)
	}
	payload := r.Payload
	if payload == nil {
		payload = []byte{}
	}
	args := make([]any, 0, 5+len(r.Values))
	scopes := string(commitlog.AppendScopesJSON(nil, r.Scopes))
	args = append(args, t.locked.ID, r.RowID, scopes, payload)
	for i, c := range ts.t.Columns {
		args = append(args, bindValue(c.Type, r.Values[i]))
	}
	var versions any // NULL
	if r.ColumnVersions != nil {
		versions = r.ColumnVersions
	}
	args = append(args, versions)
	k := rowKey{table, r.RowID}
	var version int64
	if v, ok := t.known[k]; ok && t.deferOK {
		// The row's state is known under the lock, so is the version the
		// upsert returns: it goes with the next statement (deferred
		// writes, above).
		version = v + 1
		t.queue(ts.upsert, args...)
		t.deferred = true
	} else if _, err := t.queryRow(ctx, ts.upsert, args, &version); err != nil {
		return 0, t.fail("upsert row", table, err)
	}
	t.s.analyzer.wrote(table, 1)
	if version == 1 { // an insert: the row is no longer deleted; sent with the next statement
		t.queue(qClearTombstone, t.locked.ID, table, r.RowID)
	}
	if r.Version > 0 && r.Version != version {
		t.queue(ts.setVersion, t.locked.ID, r.RowID, r.Version)
		version = r.Version
	}
	if t.known == nil {
		t.known = map[rowKey]int64{}
	}
	t.known[k] = version
	if ts.blobRefs {
		t.queueBlobRefs(ts, r.RowID, blobcore.RefIDs(ts.t, r.Values, nil), scopes)
	}
	return version, nil
}

const (
	qClearTombstone = `DELETE FROM sync_tombstones WHERE partition = $1 AND tbl = $2 AND row_id = $3`
	qGetTombstone   = `SELECT commit_seq FROM sync_tombstones WHERE partition = $1 AND tbl = $2 AND row_id = $3`
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
	ok, err := t.queryRow(ctx, qGetTombstone, []any{t.locked.ID, table, rowID}, &seq)
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
	var out []storage.Row
	args := []any{p.Partition, bindValue(ts.t.Columns[col].Type, p.Value), p.AfterRowID, p.Limit}
	err = t.query(ctx, ts.byColumn[col], args, func(rows pgx.Rows) error {
		for rows.Next() {
			var r storage.Row
			var scopes string
			if err := rows.Scan(&r.RowID, &r.ServerVersion, &scopes, &r.Payload, &r.ColumnVersions); err != nil {
				return err
			}
			if r.Scopes, err = commitlog.ParseScopesJSON([]byte(scopes)); err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
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
	delete(t.ahead, rowKey{table, rowID})
	delete(t.known, rowKey{table, rowID})
	tag, err := t.exec(ctx, ts.delete, t.locked.ID, rowID)
	if err != nil {
		return false, t.fail("delete row", table, err)
	}
	if ts.blobRefs && tag.RowsAffected() > 0 { // sent with the next statement
		t.queue(qBlobRefsDelete, t.locked.ID, table, rowID)
	}
	return tag.RowsAffected() > 0, nil
}

// RowScan implements storage.ReadTx. Each filter runs on the typed scope
// column: one value is an equality the column's scope index serves in row
// id order; several are = ANY of an array parameter.
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
	param := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	for i := range filters {
		f := &filters[i]
		var list any = f.Strings
		switch {
		case f.Ints != nil:
			list = f.Ints
		case f.Bools != nil:
			list = f.Bools
		}
		if f.Len() == 1 {
			switch {
			case f.Ints != nil:
				list = f.Ints[0]
			case f.Bools != nil:
				list = f.Bools[0]
			default:
				list = f.Strings[0]
			}
			q.WriteString(" AND " + quote(f.Column) + " = " + param(list))
			continue
		}
		q.WriteString(" AND " + quote(f.Column) + " = ANY(" + param(list) + ")")
	}
	if p.AfterRowID != "" {
		q.WriteString(" AND " + quote(schemaplan.ColRowID) + " > " + param(p.AfterRowID))
	}
	q.WriteString(" ORDER BY " + quote(schemaplan.ColRowID) + " LIMIT " + param(p.Limit))

	out := make([]storage.Row, 0, min(p.Limit, 1024))
	err = t.query(ctx, q.String(), args, func(rows pgx.Rows) error {
		for rows.Next() {
			var r storage.Row
			if err := rows.Scan(&r.RowID, &r.ServerVersion, &r.Payload); err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, t.fail("scan rows", p.Table, err)
	}
	return out, nil
}
