package sqlitestore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
)

// Multi-row inserts are chunked; each chunk size has one cached statement.
const (
	changeChunk = 32 // 9 parameters per row
	indexChunk  = 64 // 5 parameters per row
)

const tombstoneChunk = 64 // 4 parameters per row

var (
	insertChangesSQL   [changeChunk + 1]string
	insertIndexSQL     [indexChunk + 1]string
	insertTombstoneSQL [tombstoneChunk + 1]string
)

func init() {
	for n := 1; n <= changeChunk; n++ {
		insertChangesSQL[n] = "INSERT INTO sync_changes (partition, seq, idx, tbl, row_id, op, row_version, scopes, row) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?, ?), ", n), ", ")
	}
	for n := 1; n <= indexChunk; n++ {
		insertIndexSQL[n] = "INSERT INTO sync_scope_index (partition, tbl, variable, value, seq) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", n), ", ")
	}
	for n := 1; n <= tombstoneChunk; n++ {
		insertTombstoneSQL[n] = "INSERT INTO sync_tombstones (partition, tbl, row_id, commit_seq) VALUES " +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", n), ", ") +
			" ON CONFLICT (partition, tbl, row_id) DO UPDATE SET commit_seq = excluded.commit_seq"
	}
}

const (
	qInsertCommit = `INSERT INTO sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, schema_version, writer_version)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
)

// CommitAppend implements storage.Tx. The seq comes from the locked
// partition row plus this transaction's earlier appends, so no read is
// needed; changes and index entries go in chunked multi-row inserts.
func (t *tx) CommitAppend(ctx context.Context, c storage.CommitParams) (int64, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	if err := commitlog.CheckCommit(&c); err != nil {
		return 0, err
	}
	part := t.locked.ID
	seq := t.maxSeq + 1
	if _, err := t.c.exec(ctx, qInsertCommit, part, seq, c.CreatedAtMs, c.ActorID, c.ClientID, c.ClientCommitID, c.SchemaVersion, commitlog.WriterVersion(&c)); err != nil {
		return 0, t.fail("append commit", "", err)
	}
	for start := 0; start < len(c.Changes); start += changeChunk {
		chunk := c.Changes[start:min(start+changeChunk, len(c.Changes))]
		args := t.scratch.args[:0]
		buf := t.scratch.scopes[:0]
		offsets := make([]int, 0, len(chunk)+1)
		for _, ch := range chunk {
			offsets = append(offsets, len(buf))
			buf = commitlog.AppendScopesJSON(buf, ch.Scopes)
		}
		offsets = append(offsets, len(buf))
		for i, ch := range chunk {
			var version, row any
			if ch.Op == storage.OpUpsert {
				version, row = ch.RowVersion, ch.Row
			}
			args = append(args, part, seq, start+i, ch.Table, ch.RowID, int64(ch.Op), version,
				string(buf[offsets[i]:offsets[i+1]]), row)
		}
		t.scratch.args, t.scratch.scopes = args, buf
		if _, err := t.c.exec(ctx, insertChangesSQL[len(chunk)], args...); err != nil {
			return 0, t.fail("append commit", "", err)
		}
	}
	t.scratch.entries = commitlog.IndexEntries(t.scratch.entries, c.Changes)
	for start := 0; start < len(t.scratch.entries); start += indexChunk {
		chunk := t.scratch.entries[start:min(start+indexChunk, len(t.scratch.entries))]
		args := t.scratch.args[:0]
		for _, e := range chunk {
			args = append(args, part, e.Table, e.Variable, e.Value, seq)
		}
		t.scratch.args = args
		if _, err := t.c.exec(ctx, insertIndexSQL[len(chunk)], args...); err != nil {
			return 0, t.fail("append commit", "", err)
		}
	}
	t.scratch.tombstones = commitlog.Tombstones(t.scratch.tombstones, c.Changes)
	for start := 0; start < len(t.scratch.tombstones); start += tombstoneChunk {
		chunk := t.scratch.tombstones[start:min(start+tombstoneChunk, len(t.scratch.tombstones))]
		args := t.scratch.args[:0]
		for _, tb := range chunk {
			args = append(args, part, tb.Table, tb.RowID, seq)
		}
		t.scratch.args = args
		if _, err := t.c.exec(ctx, insertTombstoneSQL[len(chunk)], args...); err != nil {
			return 0, t.fail("append commit", "", err)
		}
	}
	t.maxSeq = seq
	return seq, nil
}

// windowSQL is the statement of a window's next run and its arguments:
// the next candidate commits that may match (limit of them after
// args[cursorArg], the exclusive lower bound to set before each run, up
// to maxSeq), each with its changes of the table and its header (see
// windowText).
//
// The candidates: the first variable drives an ordered walk of the scope
// index, every other variable must have an index entry for the same
// commit. The exact match is then made on each change's stored scopes.
//
// The text depends only on how many variables there are and which of
// them hold one value, so it is built once per such shape (windowTexts);
// each run builds only its arguments.
func windowSQL(p *storage.WindowParams, vars []string, maxSeq int64, limit int) (q string, args []any, cursorArg int) {
	// shape: one byte per variable, 1 for a single value, n for a list.
	var shapeBuf [8]byte
	shape := shapeBuf[:0]
	args = make([]any, 0, 4*len(vars)+6)
	cond := func(v string) {
		vals := p.Scopes[v]
		args = append(args, p.Partition, p.Table, v)
		if len(vals) == 1 {
			shape = append(shape, '1')
			args = append(args, vals[0])
		} else {
			shape = append(shape, 'n')
			args = append(args, jsonStrings(vals))
		}
	}
	cond(vars[0])
	cursorArg = len(args)
	args = append(args, int64(0), maxSeq)
	for _, v := range vars[1:] {
		cond(v)
	}
	args = append(args, limit, p.Partition, p.Table, p.Partition)
	if t, ok := windowTexts.Load(string(shape)); ok {
		return t.(string), args, cursorArg
	}
	q = windowText(shape)
	windowTexts.Store(string(shape), q)
	return q, args, cursorArg
}

// windowTexts caches windowText by shape. The shapes are bounded by the
// schema's scope variables per table.
var windowTexts sync.Map

// candidatesText is the candidates subquery of windowText.
func candidatesText(shape []byte) string {
	var b strings.Builder
	cond := func(alias string, one bool) {
		fmt.Fprintf(&b, "%[1]s.partition = ? AND %[1]s.tbl = ? AND %[1]s.variable = ? ", alias)
		if one {
			fmt.Fprintf(&b, "AND %s.value = ? ", alias)
		} else {
			fmt.Fprintf(&b, "AND %s.value IN (SELECT value FROM json_each(?)) ", alias)
		}
	}
	distinct := ""
	if shape[0] == 'n' {
		distinct = "DISTINCT "
	}
	b.WriteString("SELECT " + distinct + "s.seq AS seq FROM sync_scope_index s WHERE ")
	cond("s", shape[0] == '1')
	b.WriteString("AND s.seq > ? AND s.seq <= ? ")
	for i, one := range shape[1:] {
		alias := "x" + strconv.Itoa(i)
		b.WriteString("AND EXISTS (SELECT 1 FROM sync_scope_index " + alias + " WHERE ")
		cond(alias, one == '1')
		b.WriteString("AND " + alias + ".seq = s.seq) ")
	}
	b.WriteString("ORDER BY s.seq LIMIT +?")
	return b.String()
}

func jsonStrings(vs []string) string {
	b := []byte{'['}
	for i, v := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = commitlog.AppendJSONString(b, v)
	}
	return string(append(b, ']'))
}

// windowText is the window statement of a candidates shape: the next
// candidate commits (candidatesText as a subquery; then the partition,
// the table and the partition again), each with its changes of
// the table and its commit header, in commit order. A candidate without
// such a change still yields one row, with op 0, so a run counts its
// candidates. One statement instead of the candidates and then their
// changes: a window costs one statement, and its candidates pass no JSON
// list through Go. The rows are ordered by commit only: each commit's
// changes come from one primary-key seek, in idx order, and an ORDER BY
// on idx as well would make SQLite sort every commit's rows
// (offerWindow restores idx order if they ever come otherwise).
func windowText(shape []byte) string {
	return `SELECT ` + unnamed("cand.seq", "coalesce(ch.idx, 0)", "coalesce(ch.row_id, '')", "coalesce(ch.op, 0)", "ch.row_version",
		"coalesce(ch.scopes, '')", "ch.row", "coalesce(c.created_at_ms, 0)", "coalesce(c.actor_id, '')",
		"coalesce(c.client_id, '')", "coalesce(c.client_commit_id, '')", "coalesce(c.schema_version, 0)") + `
	FROM (` + candidatesText(shape) + `) AS cand
	LEFT JOIN sync_changes ch ON ch.partition = ? AND ch.seq = cand.seq AND ch.tbl = ?
	LEFT JOIN sync_commits c ON c.partition = ? AND c.seq = cand.seq
	ORDER BY cand.seq`
}

// CommitWindow implements storage.ReadTx: the partition row, the
// candidates, the changes and the commit headers are all read in this
// transaction's snapshot.
func (t *tx) CommitWindow(ctx context.Context, p storage.WindowParams) (storage.Window, error) {
	if err := t.check(); err != nil {
		return storage.Window{}, err
	}
	if t.fromCache && p.Partition == t.planned {
		// Its statements, for checkCached (partcache.go).
		ran := t.c.ran
		defer func() { t.windowRan += t.c.ran - ran }()
	}
	if err := commitlog.CheckWindow(&p); err != nil {
		return storage.Window{}, err
	}
	var part storage.Partition
	if t.snap != nil && t.snap.ID == p.Partition {
		part = *t.snap // read earlier in this read-only snapshot
	} else {
		var ok bool
		var err error
		part, ok, err = readPartition(ctx, t.c, p.Partition)
		if err != nil {
			t.aborted = true
			return storage.Window{}, fmt.Errorf("commit window: %w", err)
		}
		if !ok {
			return storage.Window{}, unregistered("commit window", p.Partition)
		}
	}
	w := commitlog.NewWindow(&p)
	vars, empty := commitlog.Variables(p.Scopes)
	if empty || p.AfterSeq >= part.MaxCommitSeq {
		w.Exhausted()
		return w.Result(part.MaxCommitSeq, part.HorizonSeq), nil
	}
	// Every matching commit holds at least one matching change, so
	// limit+1 candidates are enough to fill the window and see past it.
	batch := p.Limit + 1
	q, args, cursorArg := windowSQL(&p, vars, part.MaxCommitSeq, batch)
	cursor := p.AfterSeq
	for {
		args[cursorArg] = cursor
		n, last, open, err := t.offerWindow(ctx, w, q, args, p.Table)
		if err != nil {
			return storage.Window{}, err
		}
		if !open {
			break
		}
		if n < batch {
			w.Exhausted()
			break
		}
		cursor = last
	}
	return w.Result(part.MaxCommitSeq, part.HorizonSeq), nil
}

// qLastScopeSeq seeks, for each value, the newest index entry (the
// primary key ends in seq, so each is one backward seek) and keeps the
// greatest.
const qLastScopeSeq = `SELECT COALESCE(MAX((SELECT s.seq FROM sync_scope_index s
		WHERE s.partition = ? AND s.tbl = ? AND s.variable = ? AND s.value = j.value ORDER BY s.seq DESC LIMIT 1)), 0)
	FROM json_each(?) j`

// LastScopeSeq implements storage.ReadTx.
func (t *tx) LastScopeSeq(ctx context.Context, partition, table, variable string, values []string) (int64, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	if len(values) == 0 {
		return 0, nil
	}
	var seq int64
	if _, err := t.c.queryRow(ctx, qLastScopeSeq, []any{partition, table, variable, jsonStrings(values)}, &seq); err != nil {
		return 0, t.fail("last scope seq", "", err)
	}
	return seq, nil
}

// offerWindow runs a window statement (windowSQL) and streams its
// commits into w: n candidates read, the last one's seq, and whether w is
// still open.
func (t *tx) offerWindow(ctx context.Context, w *commitlog.Window, q string, args []any, table string) (n int, last int64, open bool, err error) {
	rows, err := t.c.query(ctx, q, args...)
	if err != nil {
		return 0, 0, false, t.fail("commit window", "", err)
	}
	defer rows.Close()
	var cur storage.Commit
	var idx []int64 // cur's changes' idx, to check their order
	offer := func() bool {
		if cur.CommitSeq == 0 {
			return true
		}
		if !slices.IsSorted(idx) {
			sortChanges(cur.Changes, idx)
		}
		return w.Offer(cur)
	}
	for rows.Next() {
		var (
			seq, i, op int64
			ch         storage.Change
			ver        *int64
			scopes     []byte
			hdr        storage.Commit
		)
		if err := rows.Scan(&seq, &i, &ch.RowID, &op, &ver, &scopes, &ch.Row,
			&hdr.CreatedAtMs, &hdr.ActorID, &hdr.ClientID, &hdr.ClientCommitID, &hdr.SchemaVersion); err != nil {
			return 0, 0, false, t.fail("commit window", "", err)
		}
		if seq != last {
			n++
			last = seq
		}
		if op == 0 {
			continue // a candidate without a change of the table
		}
		if seq != cur.CommitSeq {
			if !offer() {
				return n, last, false, nil
			}
			cur = hdr
			cur.CommitSeq = seq
			idx = idx[:0]
		}
		ch.Table, ch.Op = table, storage.Op(op)
		if ver != nil {
			ch.RowVersion = *ver
		}
		if ch.Scopes, err = commitlog.ParseScopesJSON(scopes); err != nil {
			return 0, 0, false, fmt.Errorf("commit window: %w", err)
		}
		cur.Changes = append(cur.Changes, ch)
		idx = append(idx, i)
	}
	if err := rows.Err(); err != nil {
		return 0, 0, false, t.fail("commit window", "", err)
	}
	return n, last, offer(), nil
}

// sortChanges orders one commit's changes by their idx.
func sortChanges(changes []storage.Change, idx []int64) {
	order := make([]int, len(changes))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(idx[a], idx[b]) })
	sorted := make([]storage.Change, len(changes))
	for i, j := range order {
		sorted[i] = changes[j]
	}
	copy(changes, sorted)
	slices.Sort(idx)
}

// CommitRange implements storage.Store, reading commits and changes in one
// snapshot.
func (s *Store) CommitRange(ctx context.Context, partition string, afterSeq int64, limit int) ([]storage.Commit, error) {
	_, out, err := s.commitRange(ctx, partition, afterSeq, limit, false)
	return out, err
}

// PartitionCommitRange implements storage.Store: CommitRange with the
// partition row, in the same snapshot.
func (s *Store) PartitionCommitRange(ctx context.Context, partition string, afterSeq int64, limit int) (storage.Partition, []storage.Commit, error) {
	return s.commitRange(ctx, partition, afterSeq, limit, true)
}

func (s *Store) commitRange(ctx context.Context, partition string, afterSeq int64, limit int, withPartition bool) (storage.Partition, []storage.Commit, error) {
	var p storage.Partition
	if err := commitlog.CheckRange(limit); err != nil {
		return p, nil, err
	}
	var out []storage.Commit
	err := s.withReader(ctx, func(c *conn) error {
		return readTx(ctx, c, func() (err error) {
			if withPartition {
				var ok bool
				if p, ok, err = readPartition(ctx, c, partition); err != nil {
					return err
				}
				if !ok {
					return unregistered("commit range", partition)
				}
			}
			out, err = readCommitRange(ctx, c, partition, afterSeq, limit)
			return err
		})
	})
	if err != nil {
		return storage.Partition{}, nil, fmt.Errorf("commit range: %w", err)
	}
	return p, out, nil
}

// readCommitRange reads whole commits after afterSeq in c's transaction.
func readCommitRange(ctx context.Context, c *conn, partition string, afterSeq int64, limit int) (out []storage.Commit, err error) {
	rows, err := c.query(ctx, `SELECT seq, created_at_ms, actor_id, client_id, client_commit_id, schema_version
		FROM sync_commits WHERE partition = ? AND seq > ? ORDER BY seq LIMIT +?`, partition, afterSeq, limit)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var cm storage.Commit
		if err := rows.Scan(&cm.CommitSeq, &cm.CreatedAtMs, &cm.ActorID, &cm.ClientID, &cm.ClientCommitID, &cm.SchemaVersion); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, cm)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(out) == 0 {
		return out, err
	}
	rows, err = c.query(ctx, `SELECT seq, tbl, row_id, op, row_version, scopes, row FROM sync_changes
		WHERE partition = ? AND seq >= ? AND seq <= ? ORDER BY seq, idx`,
		partition, out[0].CommitSeq, out[len(out)-1].CommitSeq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var (
			seq    int64
			ch     storage.Change
			op     int64
			ver    *int64
			scopes []byte
		)
		if err := rows.Scan(&seq, &ch.Table, &ch.RowID, &op, &ver, &scopes, &ch.Row); err != nil {
			return nil, err
		}
		ch.Op = storage.Op(op)
		if ver != nil {
			ch.RowVersion = *ver
		}
		if ch.Scopes, err = commitlog.ParseScopesJSON(scopes); err != nil {
			return nil, err
		}
		for out[i].CommitSeq != seq {
			i++
		}
		out[i].Changes = append(out[i].Changes, ch)
	}
	return out, rows.Err()
}

// CommitMaxSeq implements storage.Store.
func (s *Store) CommitMaxSeq(ctx context.Context, partition string) (int64, error) {
	var seq int64
	err := s.withReader(ctx, func(c *conn) error {
		_, err := c.queryRow(ctx, `SELECT coalesce(max(seq), 0) FROM sync_commits WHERE partition = ?`, []any{partition}, &seq)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("commit max seq: %w", err)
	}
	return seq, nil
}
