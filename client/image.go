package client

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/syncnode/syncnode/sqliteimage"
	"github.com/syncnode/syncnode/ssp2"
)

// imageChunk is the most rows one replica update of an image applies
// (SPEC.md §5.3: transactions of at most 1,024 rows).
const imageChunk = 1024

// image applies a SQLite-image segment (SPEC.md §5.3) whose bytes
// already matched their content address: it must open as an image whose
// metadata equals the descriptor and whose data table has the table's
// columns in order (else sync.invalid_request, sync.schema_mismatch);
// then its rows are upserted in chunks of at most 1,024, the first
// preceded by the fresh bootstrap's clear, each row's _syncular_version
// its server version. The applied count must equal the descriptor's.
func (r *roundState) image(data []byte, f *ssp2.SegmentRef) error {
	s := r.sec
	if !s.start.Bootstrap {
		return errors.New("image in an incremental section")
	}
	s.segments++
	t := s.sub.table
	l := sqliteimage.Layout{Table: t.Name, Columns: t.WireColumns(), PK: t.PKIndex}
	im, err := sqliteimage.Open(data)
	if err != nil {
		return err
	}
	want := sqliteimage.Meta{Format: sqliteimage.Format, Table: f.Table, SchemaVersion: r.c.schema.Version,
		AsOfCommitSeq: f.AsOfCommitSeq, ScopeDigest: f.ScopeDigest, RowCount: f.RowCount}
	if err := im.Check(l, want); err != nil {
		return err
	}
	if s.fresh {
		// An image is always its table's first page (SPEC.md §5.6).
		if _, ok := r.c.rep.purge(t.Name, s.start.EffectiveScopes); !ok {
			return &Error{Op: "apply image", Code: ssp2.CodeScopeRevoked, Message: "effective scopes name a variable without a scope column in " + t.Name}
		}
	}
	pk, pkType := t.PKIndex, t.Columns[t.PKIndex].Type
	tr := r.c.rep.tables[t.Name]
	r.c.rep.mu.Lock()
	if len(tr.rows) == 0 && f.RowCount > 0 && f.RowCount <= 1<<24 {
		// A fresh replica: size the table once instead of growing it
		// through every doubling.
		tr.rows = make(map[string]rowEntry, f.RowCount)
	}
	r.c.rep.mu.Unlock()
	// Rows of a chunk are encoded into one buffer, then copied into an
	// arena of exactly their size with their ids in one string: two
	// allocations per chunk rather than two per row. Reading and applying
	// overlap: this goroutine reads and encodes the next chunk while an
	// applier goroutine puts the previous one into the replica, in order,
	// one chunk per replica update.
	type pending struct {
		version        int64
		start, end     int
		idStart, idEnd int
	}
	type chunk struct {
		rows  []pending
		arena []byte
		ids   string
	}
	free := make(chan []pending, 3)
	for range cap(free) {
		free <- make([]pending, 0, imageChunk)
	}
	work := make(chan chunk, 1)
	var applied int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range work {
			r.c.rep.mu.Lock()
			for _, p := range c.rows {
				tr.rows[c.ids[p.idStart:p.idEnd]] = rowEntry{version: p.version, data: c.arena[p.start:p.end:p.end]}
			}
			r.c.rep.mu.Unlock()
			applied += int64(len(c.rows))
			free <- c.rows[:0]
		}
	}()
	rows := <-free
	var buf, ids []byte
	flush := func() {
		work <- chunk{rows: rows, arena: append([]byte(nil), buf...), ids: string(ids)}
		rows, buf, ids = <-free, buf[:0], ids[:0]
	}
	n, err := im.Rows(l, func(version int64, vals []ssp2.Value) error {
		v := vals[pk]
		if v.Null {
			return ssp2.Errorf(ssp2.CodeInvalidRequest, "sqlite image: a row without a primary key")
		}
		start := len(buf)
		var err error
		if buf, err = t.Codec.AppendRow(buf, vals); err != nil {
			return err
		}
		idStart := len(ids)
		if ids, err = appendRowID(ids, pkType, v); err != nil {
			return err
		}
		rows = append(rows, pending{version: version, start: start, end: len(buf), idStart: idStart, idEnd: len(ids)})
		if len(rows) == imageChunk {
			flush()
		}
		return nil
	})
	if err == nil && len(rows) > 0 {
		flush()
	}
	// A failure leaves the chunks before it applied (SPEC.md §5.3: the
	// committed prefix stays for a safe retry).
	close(work)
	<-done
	if err != nil {
		return err
	}
	if n != f.RowCount || applied != f.RowCount {
		return ssp2.Errorf(ssp2.CodeInvalidRequest, "sqlite image: applied %d rows, the descriptor says %d", applied, f.RowCount)
	}
	r.res.SegmentRows += applied
	r.res.Segments++
	r.res.Images++
	return nil
}

// appendRowID appends the wire rowId of a primary-key value.
func appendRowID(dst []byte, t ssp2.ColumnType, v ssp2.Value) ([]byte, error) {
	switch t {
	case ssp2.TypeString, ssp2.TypeJSON:
		return append(dst, v.Bytes...), nil
	case ssp2.TypeInteger:
		return strconv.AppendInt(dst, v.Int, 10), nil
	case ssp2.TypeBoolean:
		return strconv.AppendBool(dst, v.Bool), nil
	}
	return dst, fmt.Errorf("primary key type %s has no rowId form", t)
}
