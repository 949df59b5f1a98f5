package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
)

// qAppendCommit inserts a commit, its changes, its scope-index entries and
// its tombstones in one statement of fixed shape: they travel as arrays,
// so any commit size is one prepared statement and one round trip.
const qAppendCommit = `WITH c AS (
		INSERT INTO sync_commits (partition, seq, created_at_ms, actor_id, client_id, client_commit_id, schema_version, writer_version)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $18)
	), ch AS (
		INSERT INTO sync_changes (partition, seq, idx, tbl, row_id, op, row_version, scopes, row)
		SELECT $1, $2, x.idx, x.tbl, x.row_id, x.op, x.row_version, x.scopes, x.row
		FROM unnest($8::int[], $9::text[], $10::text[], $11::smallint[], $12::bigint[], $13::text[], $14::bytea[])
			AS x(idx, tbl, row_id, op, row_version, scopes, row)
	), tb AS (
		INSERT INTO sync_tombstones (partition, tbl, row_id, commit_seq)
		SELECT $1, z.tbl, z.row_id, $2 FROM unnest($19::text[], $20::text[]) AS z(tbl, row_id)
		ON CONFLICT (partition, tbl, row_id) DO UPDATE SET commit_seq = EXCLUDED.commit_seq
	)
	INSERT INTO sync_scope_index (partition, tbl, variable, value, seq)
	SELECT $1, y.tbl, y.variable, y.value, $2
	FROM unnest($15::text[], $16::text[], $17::text[]) AS y(tbl, variable, value)`

// CommitAppend implements storage.Tx. The seq comes from the locked
// partition plus this transaction's earlier appends, and nothing is read
// back, so the statement is queued for the next round trip.
func (t *tx) CommitAppend(ctx context.Context, c storage.CommitParams) (int64, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	if err := commitlog.CheckCommit(&c); err != nil {
		return 0, err
	}
	seq := t.maxSeq + 1
	// The arguments are encoded when the queue is sent, so they must not
	// alias the caller's memory: row bytes are copied into one buffer.
	n := len(c.Changes)
	var (
		idx      = make([]int32, n)
		tbl      = make([]string, n)
		rowID    = make([]string, n)
		op       = make([]int16, n)
		versions = make([]int64, n)
		version  = make([]*int64, n)
		scopes   = make([]string, n)
		row      = make([][]byte, n)
		scopeBuf []byte
		size     int
	)
	for i := range c.Changes {
		size += len(c.Changes[i].Row)
	}
	rowBuf := make([]byte, 0, size)
	for i := range c.Changes {
		ch := &c.Changes[i]
		idx[i], tbl[i], rowID[i], op[i] = int32(i), ch.Table, ch.RowID, int16(ch.Op)
		if ch.Op == storage.OpUpsert {
			versions[i] = ch.RowVersion
			version[i] = &versions[i]
			start := len(rowBuf)
			rowBuf = append(rowBuf, ch.Row...)
			row[i] = rowBuf[start:len(rowBuf):len(rowBuf)]
		}
		scopeBuf = commitlog.AppendScopesJSON(scopeBuf[:0], ch.Scopes)
		scopes[i] = string(scopeBuf)
	}
	entries := commitlog.IndexEntries(nil, c.Changes)
	eTbl, eVar, eVal := make([]string, len(entries)), make([]string, len(entries)), make([]string, len(entries))
	for i, e := range entries {
		eTbl[i], eVar[i], eVal[i] = e.Table, e.Variable, e.Value
	}
	tombstones := commitlog.Tombstones(nil, c.Changes)
	tTbl, tRow := make([]string, len(tombstones)), make([]string, len(tombstones))
	for i, tb := range tombstones {
		tTbl[i], tRow[i] = tb.Table, tb.RowID
	}
	t.queue(qAppendCommit, t.locked.ID, seq, c.CreatedAtMs, c.ActorID, c.ClientID, c.ClientCommitID, c.SchemaVersion,
		idx, tbl, rowID, op, version, scopes, row, eTbl, eVar, eVal, commitlog.WriterVersion(&c), tTbl, tRow)
	t.maxSeq = seq
	t.s.analyzer.wrote("sync_commits", 1)
	t.s.analyzer.wrote("sync_changes", n)
	t.s.analyzer.wrote("sync_scope_index", len(entries))
	return seq, nil
}

// candidatesSQL finds the next commits that may match a window: the first
// variable drives an ordered walk of the scope index, every other
// variable must have an index entry for the same commit. The exact match
// is then made on each change's stored scopes. args[cursorArg] is the
// exclusive lower bound to set before each run.
func candidatesSQL(p *storage.WindowParams, vars []string, maxSeq int64, limit int) (q string, args []any, cursorArg int) {
	var b strings.Builder
	args = []any{p.Partition, p.Table}
	param := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	cond := func(alias, v string) {
		vals := p.Scopes[v]
		fmt.Fprintf(&b, "%[1]s.partition = $1 AND %[1]s.tbl = $2 AND %[1]s.variable = %[2]s ", alias, param(v))
		if len(vals) == 1 {
			fmt.Fprintf(&b, "AND %s.value = %s ", alias, param(vals[0]))
		} else {
			fmt.Fprintf(&b, "AND %s.value = ANY(%s) ", alias, param(vals))
		}
	}
	distinct := ""
	if len(p.Scopes[vars[0]]) > 1 {
		distinct = "DISTINCT "
	}
	b.WriteString("SELECT " + distinct + "s.seq FROM sync_scope_index s WHERE ")
	cond("s", vars[0])
	cursorArg = len(args)
	fmt.Fprintf(&b, "AND s.seq > %s AND s.seq <= %s ", param(int64(0)), param(maxSeq))
	for i, v := range vars[1:] {
		alias := "x" + strconv.Itoa(i)
		b.WriteString("AND EXISTS (SELECT 1 FROM sync_scope_index " + alias + " WHERE ")
		cond(alias, v)
		b.WriteString("AND " + alias + ".seq = s.seq) ")
	}
	b.WriteString("ORDER BY s.seq LIMIT " + param(limit))
	return b.String(), args, cursorArg
}

const (
	// The seq range makes the plan an ordered primary-key range scan
	// whatever the planner's statistics say (no sort); ANY keeps only the
	// candidates.
	qWindowChanges = `SELECT seq, row_id, op, row_version, scopes, row FROM sync_changes
		WHERE partition = $1 AND seq >= $4 AND seq <= $5 AND seq = ANY($2) AND tbl = $3 ORDER BY seq, idx`
	qCommitHeaders = `SELECT seq, created_at_ms, actor_id, client_id, client_commit_id, schema_version FROM sync_commits
		WHERE partition = $1 AND seq >= $3 AND seq <= $4 AND seq = ANY($2) ORDER BY seq`
)

// qLastScopeSeq seeks, for each value, the newest index entry (the
// primary key ends in seq, so each is one backward index seek) and keeps
// the greatest.
const qLastScopeSeq = `SELECT COALESCE(MAX((SELECT s.seq FROM sync_scope_index s
		WHERE s.partition = $1 AND s.tbl = $2 AND s.variable = $3 AND s.value = v.value ORDER BY s.seq DESC LIMIT 1)), 0)
	FROM unnest($4::text[]) AS v(value)`

// LastScopeSeq implements storage.ReadTx.
func (t *tx) LastScopeSeq(ctx context.Context, partition, table, variable string, values []string) (int64, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	if len(values) == 0 {
		return 0, nil
	}
	var seq int64
	if _, err := t.queryRow(ctx, qLastScopeSeq, []any{partition, table, variable, values}, &seq); err != nil {
		return 0, t.fail("last scope seq", "", err)
	}
	return seq, nil
}

// CommitWindow implements storage.ReadTx: the partition row, the
// candidates, the changes and the commit headers are all read in this
// transaction's snapshot (or under its lock).
func (t *tx) CommitWindow(ctx context.Context, p storage.WindowParams) (storage.Window, error) {
	if err := t.check(); err != nil {
		return storage.Window{}, err
	}
	if err := commitlog.CheckWindow(&p); err != nil {
		return storage.Window{}, err
	}
	var part storage.Partition
	if t.snap != nil && t.snap.ID == p.Partition {
		part = *t.snap // read earlier in this snapshot
	} else {
		var ok bool
		var err error
		if part, ok, err = t.readPartition(ctx, p.Partition); err != nil {
			return storage.Window{}, t.fail("commit window", "", err)
		}
		if !ok {
			return storage.Window{}, unregistered("commit window", p.Partition)
		}
	}
	vars, empty := commitlog.Variables(p.Scopes)
	if empty || p.AfterSeq >= part.MaxCommitSeq {
		w := commitlog.NewWindow(&p)
		w.Exhausted()
		return w.Result(part.MaxCommitSeq, part.HorizonSeq), nil
	}
	if t.spent {
		// The first read ended the transaction: only the planned window
		// can be answered, and only when its first statement held it all.
		pw, ok := t.planned(&p)
		if !ok || pw.first.more() {
			return storage.Window{}, t.miss()
		}
		pw.w.Exhausted()
		return pw.w.Result(part.MaxCommitSeq, part.HorizonSeq), nil
	}
	// The first candidates come with their changes and headers in one
	// statement: a steady pull's whole window.
	w := commitlog.NewWindow(&p)
	f, err := t.offerFirst(ctx, w, &p, vars, part.MaxCommitSeq)
	if err != nil {
		return storage.Window{}, err
	}
	cursor, more := f.last, f.more()
	if !more {
		w.Exhausted()
	}
	headed := len(w.Commits())
	// Every matching commit holds at least one matching change, so
	// limit+1 candidates are enough to fill the window and see past it.
	batch := p.Limit + 1
	candQ, args, cursorArg := candidatesSQL(&p, vars, part.MaxCommitSeq, batch)
	for more {
		args[cursorArg] = cursor
		var seqs []int64
		err := t.query(ctx, candQ, args, func(rows pgx.Rows) (err error) {
			seqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
		if err != nil {
			return storage.Window{}, t.fail("commit window", "", err)
		}
		if len(seqs) == 0 {
			w.Exhausted()
			break
		}
		open, err := t.offerCandidates(ctx, w, &p, seqs)
		if err != nil {
			return storage.Window{}, err
		}
		if !open {
			break
		}
		if len(seqs) < batch {
			w.Exhausted()
			break
		}
		cursor = seqs[len(seqs)-1]
	}
	if err := t.fillHeaders(ctx, p.Partition, w.Commits()[headed:]); err != nil {
		return storage.Window{}, err
	}
	return w.Result(part.MaxCommitSeq, part.HorizonSeq), nil
}

// firstCandidates is how many candidate commits the first statement of a
// window reads with their changes and headers (the first chunk of
// offerCandidates).
const firstCandidates = 16

// firstRead is what the first statement of a window offered: the last
// candidate's seq, whether w is still open, and how many candidates came.
type firstRead struct {
	last       int64
	open       bool
	candidates int
}

// more reports whether reading must go on after the first statement: w is
// still open and there may be more candidates.
func (f *firstRead) more() bool { return f.open && f.candidates == firstCandidates }

// offerFirst offers the first candidate commits to w, read with their
// changes of the table and their headers in one statement.
func (t *tx) offerFirst(ctx context.Context, w *commitlog.Window, p *storage.WindowParams, vars []string, maxSeq int64) (firstRead, error) {
	var f firstRead
	q, args, read := t.firstQuery(w, p, vars, maxSeq, &f)
	if err := t.query(ctx, q, args, read); err != nil {
		return firstRead{}, t.fail("commit window", "", err)
	}
	return f, nil
}

// firstQuery is the first statement of a window, the first candidates
// with their changes of the table and their headers, and the reader of
// its rows, which offers them to w and records the outcome in f.
func (t *tx) firstQuery(w *commitlog.Window, p *storage.WindowParams, vars []string, maxSeq int64, f *firstRead) (string, []any, func(pgx.Rows) error) {
	candQ, args, cursorArg := candidatesSQL(p, vars, maxSeq, firstCandidates)
	args[cursorArg] = p.AfterSeq
	q := `WITH k AS (` + candQ + `)
		SELECT k.seq, c.created_at_ms, c.actor_id, c.client_id, c.client_commit_id, c.schema_version,
			ch.row_id, ch.op, ch.row_version, ch.scopes, ch.row
		FROM k JOIN sync_commits c ON c.partition = $1 AND c.seq = k.seq
		LEFT JOIN sync_changes ch ON ch.partition = $1 AND ch.seq = k.seq AND ch.tbl = $2
		ORDER BY k.seq, ch.idx`
	*f = firstRead{last: p.AfterSeq, open: true}
	read := func(rows pgx.Rows) error {
		var cur storage.Commit
		for rows.Next() {
			var (
				seq    int64
				h      storage.Commit
				rowID  *string
				op     *int16
				ver    *int64
				scopes *string
				row    []byte
			)
			if err := rows.Scan(&seq, &h.CreatedAtMs, &h.ActorID, &h.ClientID, &h.ClientCommitID, &h.SchemaVersion,
				&rowID, &op, &ver, &scopes, &row); err != nil {
				return err
			}
			if seq != cur.CommitSeq {
				if cur.CommitSeq != 0 && f.open {
					f.open = w.Offer(cur)
				}
				h.CommitSeq = seq
				cur = h
				f.candidates++
				f.last = seq
			}
			if rowID == nil || op == nil || scopes == nil {
				continue // a candidate without changes of the table
			}
			ch := storage.Change{Table: p.Table, RowID: *rowID, Op: storage.Op(*op), Row: row}
			if ver != nil {
				ch.RowVersion = *ver
			}
			var err error
			if ch.Scopes, err = commitlog.ParseScopesJSON([]byte(*scopes)); err != nil {
				return err
			}
			cur.Changes = append(cur.Changes, ch)
		}
		if cur.CommitSeq != 0 && f.open {
			f.open = w.Offer(cur)
		}
		return nil
	}
	return q, args, read
}

// offerCandidates offers the candidate commits to w in chunks sized from
// the changes per commit seen so far, so that a full window reads little
// more than it delivers (the server sends a statement's whole result), and
// reports whether w is still open.
func (t *tx) offerCandidates(ctx context.Context, w *commitlog.Window, p *storage.WindowParams, seqs []int64) (bool, error) {
	chunk, commits, changes := 16, 0, 0
	for len(seqs) > 0 {
		n := min(chunk, len(seqs))
		open, read, err := t.offerChanges(ctx, w, p.Partition, p.Table, seqs[:n])
		if err != nil || !open {
			return open, err
		}
		seqs = seqs[n:]
		commits, changes = commits+n, changes+read
		perCommit := max(1, changes/commits)
		chunk = max(16, (p.Limit-w.Changes())/perCommit+1)
	}
	return true, nil
}

// offerChanges streams the table's changes of the candidate commits into
// w, commit by commit; it reports whether w is still open and how many
// changes it read.
func (t *tx) offerChanges(ctx context.Context, w *commitlog.Window, partition, table string, seqs []int64) (open bool, read int, err error) {
	open = true
	err = t.query(ctx, qWindowChanges, []any{partition, seqs, table, seqs[0], seqs[len(seqs)-1]}, func(rows pgx.Rows) error {
		var cur storage.Commit
		for rows.Next() {
			var (
				seq    int64
				ch     storage.Change
				op     int16
				ver    *int64
				scopes string
			)
			if err := rows.Scan(&seq, &ch.RowID, &op, &ver, &scopes, &ch.Row); err != nil {
				return err
			}
			if seq != cur.CommitSeq && cur.CommitSeq != 0 {
				if open = w.Offer(cur); !open {
					return nil
				}
				cur = storage.Commit{}
			}
			cur.CommitSeq = seq
			ch.Table, ch.Op = table, storage.Op(op)
			if ver != nil {
				ch.RowVersion = *ver
			}
			var err error
			if ch.Scopes, err = commitlog.ParseScopesJSON([]byte(scopes)); err != nil {
				return err
			}
			cur.Changes = append(cur.Changes, ch)
			read++
		}
		if cur.CommitSeq != 0 {
			open = w.Offer(cur)
		}
		return nil
	})
	if err != nil {
		return false, read, t.fail("commit window", "", err)
	}
	return open, read, nil
}

// fillHeaders completes the delivered commits with their metadata.
func (t *tx) fillHeaders(ctx context.Context, partition string, commits []storage.Commit) error {
	if len(commits) == 0 {
		return nil
	}
	seqs := make([]int64, len(commits))
	for i, c := range commits {
		seqs[i] = c.CommitSeq
	}
	i := 0
	err := t.query(ctx, qCommitHeaders, []any{partition, seqs, seqs[0], seqs[len(seqs)-1]}, func(rows pgx.Rows) error {
		for rows.Next() {
			if i == len(commits) {
				return fmt.Errorf("more commit headers than commits")
			}
			c := &commits[i]
			if err := rows.Scan(&c.CommitSeq, &c.CreatedAtMs, &c.ActorID, &c.ClientID, &c.ClientCommitID, &c.SchemaVersion); err != nil {
				return err
			}
			i++
		}
		return nil
	})
	if err != nil {
		return t.fail("commit window", "", err)
	}
	if i != len(commits) {
		return fmt.Errorf("commit window: %d of %d commit headers found", i, len(commits))
	}
	return nil
}

// CommitRange implements storage.Store, reading commits and changes in one
// snapshot.
func (s *Store) CommitRange(ctx context.Context, partition string, afterSeq int64, limit int) ([]storage.Commit, error) {
	_, out, err := s.commitRange(ctx, partition, afterSeq, limit, false)
	return out, err
}

// PartitionCommitRange implements storage.Store: CommitRange with the
// partition row, in the same REPEATABLE READ snapshot.
func (s *Store) PartitionCommitRange(ctx context.Context, partition string, afterSeq int64, limit int) (storage.Partition, []storage.Commit, error) {
	return s.commitRange(ctx, partition, afterSeq, limit, true)
}

// The commit range's statements. The changes are bounded by the last
// commit of the page, found again in the same snapshot, so that both
// reads go in one pipeline.
const (
	qRangeCommits = `SELECT seq, created_at_ms, actor_id, client_id, client_commit_id, schema_version
		FROM sync_commits WHERE partition = $1 AND seq > $2 ORDER BY seq LIMIT $3`
	qRangeChanges = `SELECT seq, tbl, row_id, op, row_version, scopes, row FROM sync_changes
		WHERE partition = $1 AND seq > $2 AND seq <= (SELECT max(k.seq) FROM
			(SELECT seq FROM sync_commits WHERE partition = $1 AND seq > $2 ORDER BY seq LIMIT $3) k)
		ORDER BY seq, idx`
)

// commitRange reads the page in one round trip: BEGIN, the partition
// row, the commits, their changes and COMMIT in one pipeline, the reads in
// one REPEATABLE READ snapshot.
func (s *Store) commitRange(ctx context.Context, partition string, afterSeq int64, limit int, withPartition bool) (storage.Partition, []storage.Commit, error) {
	var p storage.Partition
	if err := commitlog.CheckRange(limit); err != nil {
		return p, nil, err
	}
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return p, nil, fmt.Errorf("commit range: %w", err)
	}
	defer c.Release()
	var (
		out   []storage.Commit
		found bool
		b     = &pgx.Batch{}
	)
	b.Queue("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	if withPartition {
		b.Queue(qPartition, partition).Query(func(rows pgx.Rows) error {
			if found = rows.Next(); found {
				return scanPartition(rows, &p)
			}
			return nil
		})
	}
	b.Queue(qRangeCommits, partition, afterSeq, limit).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var c storage.Commit
			if err := rows.Scan(&c.CommitSeq, &c.CreatedAtMs, &c.ActorID, &c.ClientID, &c.ClientCommitID, &c.SchemaVersion); err != nil {
				return err
			}
			out = append(out, c)
		}
		return nil
	})
	b.Queue(qRangeChanges, partition, afterSeq, limit).Query(func(rows pgx.Rows) error {
		i := 0
		for rows.Next() {
			var (
				seq    int64
				ch     storage.Change
				op     int16
				ver    *int64
				scopes string
			)
			if err := rows.Scan(&seq, &ch.Table, &ch.RowID, &op, &ver, &scopes, &ch.Row); err != nil {
				return err
			}
			ch.Op = storage.Op(op)
			if ver != nil {
				ch.RowVersion = *ver
			}
			var err error
			if ch.Scopes, err = commitlog.ParseScopesJSON([]byte(scopes)); err != nil {
				return err
			}
			for i < len(out) && out[i].CommitSeq != seq {
				i++
			}
			if i == len(out) {
				return fmt.Errorf("change of commit %d outside the page", seq)
			}
			out[i].Changes = append(out[i].Changes, ch)
		}
		return nil
	})
	b.Queue("COMMIT")
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		// A failed pipeline leaves the transaction open or aborted.
		_, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK", pgx.QueryExecModeSimpleProtocol)
		return storage.Partition{}, nil, fmt.Errorf("commit range: %w", err)
	}
	if withPartition && !found {
		return storage.Partition{}, nil, fmt.Errorf("commit range: %w", unregistered("commit range", partition))
	}
	return p, out, nil
}

// CommitMaxSeq implements storage.Store.
func (s *Store) CommitMaxSeq(ctx context.Context, partition string) (int64, error) {
	var seq int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM sync_commits WHERE partition = $1`, partition).Scan(&seq)
	if err != nil {
		return 0, fmt.Errorf("commit max seq: %w", err)
	}
	return seq, nil
}
