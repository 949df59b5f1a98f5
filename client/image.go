package client

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"

	"github.com/syncnode/syncnode/schema"
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
	tr := r.c.rep.tables[t.Name]
	r.c.rep.mu.Lock()
	tr.reserve(f.RowCount)
	r.c.rep.mu.Unlock()
	workers := 1
	if f.RowCount >= 4*imageChunk {
		workers = min(runtime.GOMAXPROCS(0), maxImageWorkers)
	}
	parts, err := im.Split(workers)
	if err != nil {
		return err
	}
	// Each part of the image is read and encoded by its own goroutine into
	// chunks; this goroutine puts the chunks into the replica in key order,
	// one chunk per replica update: the first part's as they come, then
	// the next part's, which waited buffered meanwhile. A failure stops
	// the application after the chunks before it (SPEC.md §5.3: the
	// committed prefix stays for a safe retry).
	outs := make([]chan imageRows, len(parts))
	counts := make([]int64, len(parts))
	errs := make([]error, len(parts))
	quit := make(chan struct{})
	free := make(chan []pendingImageRow, 2*len(parts)+2)
	var wg sync.WaitGroup
	for i, p := range parts {
		buffered := 2
		if i > 0 {
			buffered = int(min(f.RowCount/imageChunk/int64(len(parts))+2, 1<<14))
		}
		outs[i] = make(chan imageRows, buffered)
		wg.Go(func() {
			defer close(outs[i])
			counts[i], errs[i] = readImagePart(p, t, outs[i], free, quit)
		})
	}
	var n, applied int64
	for i := range parts {
		for c := range outs[i] {
			r.c.rep.mu.Lock()
			for _, p := range c.rows {
				tr.putOrdered(c.ids[p.idStart:p.idEnd], rowEntry{version: p.version, data: c.arena[p.start:p.end:p.end]})
			}
			r.c.rep.mu.Unlock()
			applied += int64(len(c.rows))
			select {
			case free <- c.rows[:0]:
			default:
			}
		}
		n += counts[i]
		if err = errs[i]; err != nil {
			break
		}
	}
	close(quit)
	wg.Wait()
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

// maxImageWorkers bounds the goroutines that read one image.
const maxImageWorkers = 4

// imageRows is one chunk of an image's rows, encoded: the rows' codec
// bytes in one arena and their ids in one string, two allocations per
// chunk rather than two per row. The replica's rows alias the arena.
type imageRows struct {
	rows  []pendingImageRow
	arena []byte
	ids   string
}

type pendingImageRow struct {
	version        int64
	start, end     int
	idStart, idEnd int
}

// readImagePart reads one part of an image into chunks of at most
// imageChunk rows sent on out, until the part ends, a row fails or quit
// is closed; it returns the rows the part held up to then.
func readImagePart(p sqliteimage.Part, t *schema.Table, out chan<- imageRows, free chan []pendingImageRow, quit <-chan struct{}) (int64, error) {
	l := sqliteimage.Layout{Table: t.Name, Columns: t.WireColumns(), PK: t.PKIndex}
	pk, pkType := t.PKIndex, t.Columns[t.PKIndex].Type
	take := func() []pendingImageRow {
		select {
		case rows := <-free:
			return rows
		default:
			return make([]pendingImageRow, 0, imageChunk)
		}
	}
	rows := take()
	// Rows are encoded straight into the arena the chunk hands over; the
	// next arena is sized from the last one, so it rarely grows.
	var buf, ids []byte
	flush := func() error {
		select {
		case out <- imageRows{rows: rows, arena: buf, ids: string(ids)}:
		case <-quit:
			return errImageStopped
		}
		rows, buf, ids = take(), make([]byte, 0, len(buf)+len(buf)/8), ids[:0]
		return nil
	}
	n, err := p.Rows(l, func(version int64, vals []ssp2.Value) error {
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
		rows = append(rows, pendingImageRow{version: version, start: start, end: len(buf), idStart: idStart, idEnd: len(ids)})
		if len(rows) == imageChunk {
			return flush()
		}
		return nil
	})
	if err == nil && len(rows) > 0 {
		err = flush()
	}
	return n, err
}

// errImageStopped ends a part's read once an earlier part failed; it is
// never returned from image.
var errImageStopped = errors.New("image application stopped")

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
