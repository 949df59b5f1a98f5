package segments

import (
	"fmt"
	"io"
	"iter"

	"github.com/syncnode/syncnode/ssp2"
)

// Row is one row of a rows segment: its server version and its payload in
// the row codec of the segment's columns.
type Row struct {
	ServerVersion int64
	Payload       []byte
}

// WriteRows writes one SSG2 rows segment of header h to w, taking rows
// from the sequence as they come: only the block being filled is held in
// memory (ssp2.SegmentWriter), so with a Spool as w a page of any size is
// built in bounded memory. The bytes depend only on h and the rows, so
// the same rows always give the same content address. It returns the
// number of rows written; the first error of the sequence stops it.
func WriteRows(w io.Writer, h ssp2.SegmentHeader, rows iter.Seq2[Row, error]) (int64, error) {
	sw, err := ssp2.NewSegmentWriter(w, h)
	if err != nil {
		return 0, fmt.Errorf("write rows segment: %w", err)
	}
	for r, err := range rows {
		if err != nil {
			return sw.Rows(), fmt.Errorf("write rows segment: %w", err)
		}
		if err := sw.WriteRow(r.ServerVersion, r.Payload); err != nil {
			return sw.Rows(), fmt.Errorf("write rows segment: %w", err)
		}
	}
	if err := sw.Close(); err != nil {
		return sw.Rows(), fmt.Errorf("write rows segment: %w", err)
	}
	return sw.Rows(), nil
}
