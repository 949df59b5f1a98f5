package schemaplan

import (
	"fmt"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/internal/commitlog"
)

// Rewriter rewrites the stored rows of one table during a forward
// migration: the payload, encoded for the stored layout, is decoded with a
// codec built from that layout, extended with NULLs for the appended
// columns and re-encoded for the running table; the stored scopes are
// recomputed for the running scope patterns.
type Rewriter struct {
	stored  *ssp2.RowCodec
	running *schema.Table
	added   int
}

// NewRewriter prepares the rewrite of k.
func NewRewriter(k Kept) (*Rewriter, error) {
	cols := make([]ssp2.Column, len(k.Stored.Columns))
	for i, c := range k.Stored.Columns {
		typ, ok := ssp2.ParseColumnType(c.Type)
		if !ok {
			return nil, fmt.Errorf("rewrite %s: stored column %s has unknown type %q", k.Table.Name, c.Name, c.Type)
		}
		cols[i] = ssp2.Column{Name: c.Name, Type: typ, Nullable: c.Nullable}
	}
	codec, err := ssp2.NewRowCodec(cols)
	if err != nil {
		return nil, fmt.Errorf("rewrite %s: stored layout codec: %w", k.Table.Name, err)
	}
	return &Rewriter{stored: codec, running: k.Table, added: len(k.Table.Columns) - len(cols)}, nil
}

// Rewrite returns the new payload and stored-scopes JSON of one row. A
// scope whose column is NULL (say a new pattern on an appended column) is
// left out of the stored scopes: the row then matches no filter on it.
func (r *Rewriter) Rewrite(payload []byte) (newPayload, scopesJSON []byte, err error) {
	row, err := r.stored.DecodeRow(payload, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("rewrite %s: decode stored payload: %w", r.running.Name, err)
	}
	for range r.added {
		row = append(row, ssp2.Value{Null: true})
	}
	newPayload, err = r.running.Codec.AppendRow(nil, row)
	if err != nil {
		return nil, nil, fmt.Errorf("rewrite %s: encode payload: %w", r.running.Name, err)
	}
	scopes := make(map[string]string, len(r.running.Scopes))
	for _, sc := range r.running.Scopes {
		if v, ok := schema.RenderValue(r.running.Columns[sc.ColumnIndex].Type, row[sc.ColumnIndex]); ok && v != "" {
			scopes[sc.Variable] = v
		}
	}
	return newPayload, commitlog.AppendScopesJSON(nil, scopes), nil
}

// RewritePageRows is how many rows RewriteTable reads per keyset page.
const RewritePageRows = 500

// StoredRow is one application-table row as RewriteTable reads and
// writes it back: its key, its payload and (written back) its scopes.
type StoredRow struct {
	Partition, RowID string
	Payload, Scopes  []byte
}

// RewriteTable re-encodes every stored payload of k's table and
// recomputes its scopes, in keyset pages of RewritePageRows rows in
// (partition, row id) order, so no cursor is open while the table is
// updated. read returns the page of rows after the key of after (nil: the
// first page), with Partition, RowID and Payload; write stores one page's
// rewritten Payload and Scopes by key. A page shorter than RewritePageRows
// is the last.
func RewriteTable(k Kept, read func(after *StoredRow) ([]StoredRow, error), write func(page []StoredRow) error) error {
	rw, err := NewRewriter(k)
	if err != nil {
		return err
	}
	var after *StoredRow
	for {
		page, err := read(after)
		if err != nil {
			return fmt.Errorf("ensure schema: rewrite %s: %w", k.Table.Name, err)
		}
		for i := range page {
			if page[i].Payload, page[i].Scopes, err = rw.Rewrite(page[i].Payload); err != nil {
				return err
			}
		}
		if len(page) > 0 {
			if err := write(page); err != nil {
				return fmt.Errorf("ensure schema: rewrite %s: %w", k.Table.Name, err)
			}
		}
		if len(page) < RewritePageRows {
			return nil
		}
		after = &page[len(page)-1]
	}
}
