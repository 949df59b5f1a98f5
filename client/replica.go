package client

import (
	"slices"
	"strings"
	"sync"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// Row is one replica row as the server last delivered it.
type Row struct {
	ID      string `json:"rowId"`
	Version int64  `json:"version"`
	// Values holds every column by name: string as string, integer as
	// int64, float as float64, boolean as bool, json and blob_ref as
	// json.RawMessage, bytes and crdt as []byte, NULL as nil.
	Values map[string]any `json:"values"`
}

// replica is the local copy of server rows: per table, rowId → the row's
// serverVersion and codec bytes (tableRows). Rows are kept encoded and
// decoded on read, which keeps apply at an insert and a copy per row. Readers take
// the read lock; one COMMIT frame or one segment block is applied under
// one write lock, so readers see whole frames and blocks (SPEC.md §1.4
// rule 4).
type replica struct {
	mu     sync.RWMutex
	tables map[string]*tableRows
}

func newReplica(s *schema.Schema) *replica {
	r := &replica{tables: make(map[string]*tableRows, len(s.Tables))}
	for _, t := range s.Tables {
		r.tables[t.Name] = newTableRows(t)
	}
	return r
}

// clear drops every row (log reset, SPEC.md §2.1).
func (r *replica) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tr := range r.tables {
		tr.reset()
	}
}

// purge deletes the table's rows matching effective scopes (SPEC.md §3.3,
// §5.6) and returns how many it deleted. ok is false, and nothing is
// deleted, when an effective key has no scope column in the table.
func (r *replica) purge(table string, eff map[string][]string) (n int, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tr := r.tables[table]
	if tr == nil {
		return 0, false
	}
	m, ok := newScopeMatcher(tr.t, eff)
	if !ok {
		return 0, false
	}
	var vals []ssp2.Value
	n = tr.deleteIf(func(_ string, e rowEntry) bool {
		var err error
		if vals, err = tr.t.Codec.DecodeRow(e.data, vals); err != nil {
			return false // cannot happen: rows are validated before they are stored
		}
		return m.match(vals)
	})
	return n, true
}

// version returns the row's last-known serverVersion, 0 when absent.
func (r *replica) version(table, id string) int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if tr := r.tables[table]; tr != nil {
		e, _ := tr.get(id)
		return e.version
	}
	return 0
}

func (r *replica) row(table, id string) (Row, bool) {
	r.mu.RLock()
	tr := r.tables[table]
	var e rowEntry
	ok := false
	if tr != nil {
		e, ok = tr.get(id)
	}
	r.mu.RUnlock()
	if !ok {
		return Row{}, false
	}
	vals, err := decodeValues(tr.t, e.data)
	if err != nil {
		return Row{}, false
	}
	return Row{ID: id, Version: e.version, Values: vals}, true
}

// rows returns the table's rows ordered by rowId.
func (r *replica) rows(table string) []Row {
	type raw struct {
		id string
		e  rowEntry
	}
	r.mu.RLock()
	tr := r.tables[table]
	if tr == nil {
		r.mu.RUnlock()
		return nil
	}
	snap := make([]raw, 0, tr.len())
	tr.each(func(id string, e rowEntry) { snap = append(snap, raw{id, e}) })
	r.mu.RUnlock()
	slices.SortFunc(snap, func(a, b raw) int { return strings.Compare(a.id, b.id) })
	out := make([]Row, 0, len(snap))
	for _, s := range snap {
		vals, err := decodeValues(tr.t, s.e.data)
		if err != nil {
			continue
		}
		out = append(out, Row{ID: s.id, Version: s.e.version, Values: vals})
	}
	return out
}

func (r *replica) count(table string) int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if tr := r.tables[table]; tr != nil {
		return tr.len()
	}
	return 0
}

// snapshot copies every row for persistence.
func (r *replica) snapshot() map[string][]StoredRow {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make(map[string][]StoredRow, len(r.tables))
	for name, tr := range r.tables {
		rows := make([]StoredRow, 0, tr.len())
		tr.each(func(id string, e rowEntry) { rows = append(rows, StoredRow{ID: id, Version: e.version, Row: e.data}) })
		slices.SortFunc(rows, func(a, b StoredRow) int { return strings.Compare(a.ID, b.ID) })
		out[name] = rows
	}
	return out
}

// load replaces the replica's rows with persisted ones, validating each.
// Rows of unknown tables or that do not decode are skipped; the caller
// decides what that means for the cursors.
func (r *replica) load(stored map[string][]StoredRow) (ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok = true
	for name, rows := range stored {
		tr := r.tables[name]
		if tr == nil {
			ok = false
			continue
		}
		for _, s := range rows {
			if tr.t.Codec.ValidateRow(s.Row) != nil || s.Version < 1 {
				ok = false
				continue
			}
			tr.putOrdered(s.ID, rowEntry{version: s.Version, data: s.Row})
		}
	}
	return ok
}
