package client

import (
	"slices"
	"strings"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// tableRows is one table's replica rows, keyed by rowId. Rows live in one
// of two places, never both: a map, for rows put one at a time (commits,
// pushes, out-of-order rows), and a run, for rows a bootstrap delivered in
// primary-key order (a SQLite image, a rows page): two parallel slices
// kept sorted by idCmp and searched by bisection. A 100k-row image then
// costs an append per row rather than a hash-map insert, whose random
// writes into a table of several megabytes were most of an image's apply.
// Every operation keeps the meaning of a plain map.
type tableRows struct {
	t *schema.Table
	// idCmp orders rowIds as the server orders a bootstrap: numerically
	// for an integer primary key (the image's rowid order), bytewise
	// otherwise.
	idCmp func(a, b string) int

	m map[string]rowEntry

	runIDs  []string
	runRows []rowEntry
	// runDead marks deleted run slots (nil until the first delete);
	// runLive counts the others.
	runDead []bool
	runLive int
}

type rowEntry struct {
	version int64
	data    []byte // row codec bytes, owned
}

// maxRunReserve bounds what a descriptor's row count may preallocate: a
// lying server gets a slice grown by appends, not a huge allocation.
const maxRunReserve = 1 << 20

func newTableRows(t *schema.Table) *tableRows {
	cmp := strings.Compare
	if t.Columns[t.PKIndex].Type == ssp2.TypeInteger {
		cmp = compareIntIDs
	}
	return &tableRows{t: t, idCmp: cmp, m: make(map[string]rowEntry)}
}

// compareIntIDs orders decimal rowIds numerically (negative before
// non-negative, shorter magnitude first); for other strings it is still a
// total order in which only identical strings are equal, so bisection
// stays sound whatever ids it meets.
func compareIntIDs(a, b string) int {
	na, nb := strings.HasPrefix(a, "-"), strings.HasPrefix(b, "-")
	switch {
	case na != nb:
		if na {
			return -1
		}
		return 1
	case na:
		a, b = b, a // a larger magnitude is a smaller negative number
	}
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// find returns id's run slot, dead or alive.
func (tr *tableRows) find(id string) (int, bool) {
	if len(tr.runIDs) == 0 {
		return 0, false
	}
	return slices.BinarySearchFunc(tr.runIDs, id, tr.idCmp)
}

func (tr *tableRows) alive(i int) bool { return tr.runDead == nil || !tr.runDead[i] }

func (tr *tableRows) get(id string) (rowEntry, bool) {
	if e, ok := tr.m[id]; ok {
		return e, true
	}
	if i, ok := tr.find(id); ok && tr.alive(i) {
		return tr.runRows[i], true
	}
	return rowEntry{}, false
}

// put inserts or replaces a row.
func (tr *tableRows) put(id string, e rowEntry) {
	if i, ok := tr.find(id); ok {
		tr.runRows[i] = e
		if !tr.alive(i) {
			tr.runDead[i] = false
			tr.runLive++
		}
		return
	}
	tr.m[id] = e
}

// putOrdered is put for rows that arrive in primary-key order: a row
// after the run's last id is appended to it.
func (tr *tableRows) putOrdered(id string, e rowEntry) {
	if n := len(tr.runIDs); n == 0 || tr.idCmp(id, tr.runIDs[n-1]) > 0 {
		if _, held := tr.m[id]; !held {
			tr.runIDs = append(tr.runIDs, id)
			tr.runRows = append(tr.runRows, e)
			if tr.runDead != nil {
				tr.runDead = append(tr.runDead, false)
			}
			tr.runLive++
			return
		}
	}
	tr.put(id, e)
}

// reserve makes room for n more ordered rows when the table is empty.
func (tr *tableRows) reserve(n int64) {
	if tr.len() == 0 && n > 0 {
		n = min(n, maxRunReserve)
		tr.runIDs, tr.runRows, tr.runDead = make([]string, 0, n), make([]rowEntry, 0, n), nil
	}
}

// del deletes a row; absent rows are no-ops.
func (tr *tableRows) del(id string) {
	if _, ok := tr.m[id]; ok {
		delete(tr.m, id)
		return
	}
	i, ok := tr.find(id)
	if !ok || !tr.alive(i) {
		return
	}
	if tr.runDead == nil {
		tr.runDead = make([]bool, len(tr.runIDs))
	}
	tr.runDead[i] = true
	tr.runRows[i] = rowEntry{} // release the bytes
	tr.runLive--
	if dead := len(tr.runIDs) - tr.runLive; dead > runCompactMin && dead > tr.runLive {
		tr.compact()
	}
}

// runCompactMin is the fewest dead slots single deletes compact the run
// at (when they also outnumber the live ones): compaction is O(run), so it
// waits until it frees at least as much as it costs (a variable for tests).
var runCompactMin = 1024

// compact drops the run's dead slots.
func (tr *tableRows) compact() {
	if tr.runDead == nil {
		return
	}
	k := 0
	for i := range tr.runIDs {
		if !tr.runDead[i] {
			tr.runIDs[k], tr.runRows[k] = tr.runIDs[i], tr.runRows[i]
			k++
		}
	}
	clear(tr.runIDs[k:])
	clear(tr.runRows[k:])
	tr.runIDs, tr.runRows, tr.runDead = tr.runIDs[:k], tr.runRows[:k], nil
}

func (tr *tableRows) len() int { return len(tr.m) + tr.runLive }

// each calls fn for every row, in no particular order.
func (tr *tableRows) each(fn func(id string, e rowEntry)) {
	for id, e := range tr.m {
		fn(id, e)
	}
	for i, id := range tr.runIDs {
		if tr.alive(i) {
			fn(id, tr.runRows[i])
		}
	}
}

// deleteIf deletes the rows drop reports true for and returns how many.
func (tr *tableRows) deleteIf(drop func(id string, e rowEntry) bool) int {
	n := 0
	for id, e := range tr.m {
		if drop(id, e) {
			delete(tr.m, id)
			n++
		}
	}
	for i, id := range tr.runIDs {
		if tr.alive(i) && drop(id, tr.runRows[i]) {
			if tr.runDead == nil {
				tr.runDead = make([]bool, len(tr.runIDs))
			}
			tr.runDead[i] = true
			tr.runLive--
			n++
		}
	}
	tr.compact()
	return n
}

// reset drops every row.
func (tr *tableRows) reset() {
	tr.m = make(map[string]rowEntry)
	tr.runIDs, tr.runRows, tr.runDead, tr.runLive = nil, nil, nil, 0
}
