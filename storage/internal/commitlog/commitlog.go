package commitlog

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// CheckCommit validates a commit before anything is written.
func CheckCommit(c *storage.CommitParams) error {
	for i := range c.Changes {
		ch := &c.Changes[i]
		switch {
		case ch.Op != storage.OpUpsert && ch.Op != storage.OpDelete:
			return fmt.Errorf("append commit: change %d: unknown op %d", i, ch.Op)
		case ch.Table == "" || ch.RowID == "":
			return fmt.Errorf("append commit: change %d: empty table or row id", i)
		case ch.Op == storage.OpUpsert && ch.Row == nil:
			return fmt.Errorf("append commit: change %d: upsert without a row", i)
		case len(ch.Scopes) == 0:
			e := ssp2.Errorf(ssp2.CodeMissingScopes, "change %d of table %s has no stored scopes", i, ch.Table)
			e.Op = "append commit"
			return e
		}
	}
	return nil
}

// WriterVersion is the writer version a commit records: its
// WriterVersion, or else its SchemaVersion.
func WriterVersion(c *storage.CommitParams) int32 {
	if c.WriterVersion != 0 {
		return c.WriterVersion
	}
	return c.SchemaVersion
}

// IndexEntry is one scope-index row of a commit.
type IndexEntry struct {
	Table    string
	Variable string
	Value    string
}

// IndexEntries returns a commit's scope-index rows, one per distinct
// (table, variable, value), in a stable order. buf is reused.
func IndexEntries(buf []IndexEntry, changes []storage.Change) []IndexEntry {
	out := buf[:0]
	for i := range changes {
		for k, v := range changes[i].Scopes {
			out = append(out, IndexEntry{Table: changes[i].Table, Variable: k, Value: v})
		}
	}
	if len(out) < 2 {
		return out
	}
	slices.SortFunc(out, func(a, b IndexEntry) int {
		if a.Table != b.Table {
			return strings.Compare(a.Table, b.Table)
		}
		if a.Variable != b.Variable {
			return strings.Compare(a.Variable, b.Variable)
		}
		return strings.Compare(a.Value, b.Value)
	})
	return slices.Compact(out)
}

// CheckWindow validates window parameters.
func CheckWindow(p *storage.WindowParams) error {
	if len(p.Scopes) == 0 {
		e := ssp2.Errorf(ssp2.CodeStorageScanRequiresScope, "commit window of table %s without a scope variable", p.Table)
		e.Op = "commit window"
		return e
	}
	if p.Limit < 1 || p.Limit > storage.MaxWindowLimit {
		e := ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "window limit %d outside 1..%d", p.Limit, storage.MaxWindowLimit)
		e.Op = "commit window"
		return e
	}
	return nil
}

// CheckRange validates a CommitRange limit.
func CheckRange(limit int) error {
	if limit < 1 || limit > storage.MaxCommitRangeLimit {
		e := ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "commit range limit %d outside 1..%d", limit, storage.MaxCommitRangeLimit)
		e.Op = "commit range"
		return e
	}
	return nil
}

// Variables returns the window's scope variables in byte order, with
// their value lists; variables with an empty list are reported by
// empty=true (nothing can match).
func Variables(scopes map[string][]string) (vars []string, empty bool) {
	for k, vs := range scopes {
		if len(vs) == 0 {
			empty = true
		}
		vars = append(vars, k)
	}
	slices.Sort(vars)
	return vars, empty
}

// Window assembles a pull window from candidate commits offered oldest
// first (SPEC.md §4.5): it keeps only the matching changes of each commit,
// stops before the change total would exceed the limit, never splits a
// commit, and takes an oversized first commit alone.
type Window struct {
	limit    int
	match    map[string]map[string]struct{}
	commits  []storage.Commit
	total    int
	closed   bool
	complete bool
}

// NewWindow starts a window for p (already validated).
func NewWindow(p *storage.WindowParams) *Window {
	m := make(map[string]map[string]struct{}, len(p.Scopes))
	for k, vs := range p.Scopes {
		set := make(map[string]struct{}, len(vs))
		for _, v := range vs {
			set[v] = struct{}{}
		}
		m[k] = set
	}
	return &Window{limit: p.Limit, match: m}
}

// Matches reports whether a change's stored scopes satisfy every
// variable of the window.
func (w *Window) Matches(scopes map[string]string) bool {
	for k, set := range w.match {
		v, ok := scopes[k]
		if !ok {
			return false
		}
		if _, ok := set[v]; !ok {
			return false
		}
	}
	return true
}

// Offer considers the next candidate commit, whose Changes are that
// commit's changes of the window's table; they are filtered in place. It
// reports false once the window is closed: a matching commit did not fit,
// so the window is incomplete and the caller stops reading.
func (w *Window) Offer(c storage.Commit) bool {
	if w.closed {
		return false
	}
	kept := c.Changes[:0]
	for _, ch := range c.Changes {
		if w.Matches(ch.Scopes) {
			kept = append(kept, ch)
		}
	}
	if len(kept) == 0 {
		return true
	}
	c.Changes = kept
	if w.total+len(kept) > w.limit && len(w.commits) > 0 {
		w.closed = true
		return false
	}
	w.commits = append(w.commits, c)
	w.total += len(kept)
	return true
}

// Changes returns the number of changes taken so far.
func (w *Window) Changes() int { return w.total }

// Commits returns the commits taken so far, for the caller to complete
// (their headers, say) in place.
func (w *Window) Commits() []storage.Commit { return w.commits }

// Exhausted records that no candidate commit is left up to the max seq.
func (w *Window) Exhausted() {
	if !w.closed {
		w.complete = true
	}
}

// Result returns the window as of a snapshot's max seq and horizon.
func (w *Window) Result(maxSeq, horizonSeq int64) storage.Window {
	return storage.Window{Commits: w.commits, Complete: w.complete, MaxSeq: maxSeq, HorizonSeq: horizonSeq}
}

// PruneReader is what PruneTarget reads, inside the pruning transaction.
type PruneReader interface {
	// MinActiveCursor returns the lowest non-negative cursor of the
	// partition's clients updated at or after sinceMs.
	MinActiveCursor(ctx context.Context, sinceMs int64) (cursor int64, ok bool, err error)
	// FirstCommitAtOrAfter returns the lowest commitSeq in (afterSeq,
	// throughSeq] whose createdAtMs is at or after ms.
	FirstCommitAtOrAfter(ctx context.Context, afterSeq, throughSeq, ms int64) (seq int64, ok bool, err error)
}

// NormalizePrune fills defaults and refuses negative windows and counts.
func NormalizePrune(p storage.PruneParams) (storage.PruneParams, error) {
	invalid := func(field string, v int64) error {
		e := ssp2.Errorf(ssp2.CodeStorageInvalidLimit, "prune: %s %d is negative", field, v)
		e.Op = "prune"
		return e
	}
	switch {
	case p.ActiveWindowMs < 0:
		return p, invalid("active window", p.ActiveWindowMs)
	case p.AgeForceMs < 0:
		return p, invalid("age force limit", p.AgeForceMs)
	case p.MinRetainedCommits < 0:
		return p, invalid("minimum retained commits", p.MinRetainedCommits)
	}
	if p.Literal {
		return p, nil
	}
	if p.ActiveWindowMs == 0 {
		p.ActiveWindowMs = storage.DefaultActiveWindowMs
	}
	if p.AgeForceMs == 0 {
		p.AgeForceMs = storage.DefaultAgeForceMs
	}
	if p.MinRetainedCommits == 0 {
		p.MinRetainedCommits = storage.DefaultMinRetainedCommits
	}
	return p, nil
}

// PruneTarget computes the new horizon for p (normalized) given the
// partition as read under the lock. It checks the epoch and the cursor,
// then lowers ThroughSeq to keep the newest MinRetainedCommits and to stay
// at or below the lowest cursor of an active client, except that commits
// older than the age force limit may go regardless. The result never goes
// below the current horizon; equal means nothing to do.
func PruneTarget(ctx context.Context, p storage.PruneParams, part storage.Partition, r PruneReader) (int64, error) {
	if p.LogEpoch != part.LogEpoch {
		e := ssp2.Errorf(ssp2.CodeStoragePruneEpochMismatch, "prune: log epoch is not the partition's current epoch")
		e.Op = "prune"
		return 0, e
	}
	if p.ThroughSeq < 0 || p.ThroughSeq > part.MaxCommitSeq {
		e := ssp2.Errorf(ssp2.CodeStorageInvalidPruneCursor, "prune: through seq %d outside 0..%d", p.ThroughSeq, part.MaxCommitSeq)
		e.Op = "prune"
		return 0, e
	}
	target := min(p.ThroughSeq, part.MaxCommitSeq-p.MinRetainedCommits)
	if target <= part.HorizonSeq {
		return part.HorizonSeq, nil
	}
	floor, ok, err := r.MinActiveCursor(ctx, p.NowMs-p.ActiveWindowMs)
	if err != nil {
		return 0, err
	}
	if ok && floor < target {
		// Laggards hold the horizon at their cursor, but commits older
		// than the age force limit may go: advance through the run of old
		// commits just above the floor.
		young, found, err := r.FirstCommitAtOrAfter(ctx, max(floor, part.HorizonSeq), target, p.NowMs-p.AgeForceMs)
		if err != nil {
			return 0, err
		}
		if found {
			target = max(floor, young-1)
		}
	}
	return max(target, part.HorizonSeq), nil
}

// Tombstone is a row a commit leaves deleted.
type Tombstone struct {
	Table string
	RowID string
}

// Tombstones returns the rows whose last change among changes is a
// delete, each once, in order of that change: the tombstones a commit
// writes (SPEC.md §2.2). A row deleted and then written again by the same
// commit gets none. buf is reused.
func Tombstones(buf []Tombstone, changes []storage.Change) []Tombstone {
	out := buf[:0]
	deletes := 0
	for i := range changes {
		if changes[i].Op == storage.OpDelete {
			deletes++
		}
	}
	if deletes == 0 {
		return out
	}
	last := make(map[Tombstone]int, len(changes))
	for i := range changes {
		last[Tombstone{Table: changes[i].Table, RowID: changes[i].RowID}] = i
	}
	for i := range changes {
		k := Tombstone{Table: changes[i].Table, RowID: changes[i].RowID}
		if changes[i].Op == storage.OpDelete && last[k] == i {
			out = append(out, k)
		}
	}
	return out
}
