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
