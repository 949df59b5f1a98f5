package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Pull limits (SPEC.md §4.2): silent clamps; 0 selects the default.
const (
	defaultLimitCommits = 1000
	maxLimitCommits     = 1000
	defaultSnapshotRows = 1000
	maxSnapshotRows     = 50000
	defaultSnapshotPage = 4
	maxSnapshotPages    = 50
)

func clamp(v int32, def, hi int) int {
	switch {
	case v == 0:
		return def
	case v < 1:
		return 1
	case int(v) > hi:
		return hi
	}
	return int(v)
}

// pullLimits are one request's clamped pull limits.
type pullLimits struct {
	commits, rows, pages int
	accept               uint8
}

// pull answers every subscription in request order. It returns the
// nextCursor of each active section, for the client record.
func (e *Engine) pull(ctx context.Context, r *request) ([]int64, error) {
	ph := r.req.Pull
	lim := pullLimits{
		commits: clamp(ph.LimitCommits, defaultLimitCommits, maxLimitCommits),
		rows:    clamp(ph.LimitSnapshotRows, defaultSnapshotRows, maxSnapshotRows),
		pages:   clamp(ph.MaxSnapshotPages, defaultSnapshotPage, maxSnapshotPages),
		accept:  ph.Accept,
	}
	r.registered = e.subs.get(r.client.Subscriptions)
	r.served = make(map[string]map[string][]string, len(r.req.Subscriptions))
	var cursors []int64
	for i, sub := range r.req.Subscriptions {
		e.metrics.PullSections.Add(1)
		next, active, err := e.section(ctx, r, sub, lim)
		if err != nil {
			return nil, err
		}
		if active {
			cursors = append(cursors, next)
		}
		if i < len(r.req.Subscriptions)-1 {
			// Let the client apply this section while the next is read;
			// after the last one the response ends anyway.
			_ = r.w.Flush()
		}
	}
	return cursors, nil
}

// section writes one subscription's SUB_START … SUB_END.
func (e *Engine) section(ctx context.Context, r *request, sub *ssp2.Subscription, lim pullLimits) (next int64, active bool, err error) {
	t, _ := e.cfg.Schema.Table(sub.Table) // validated in prepare
	eff, ok := r.scopes.effectiveScopes(sub.Scopes)
	if !ok {
		return sub.Cursor, false, e.closedSection(r, sub, ssp2.SubRevoked, ssp2.CodeScopeRevoked)
	}
	if prev, ok := r.registered.sub(sub.ID); ok && (sub.Cursor >= 0 || sub.BootstrapState != nil) &&
		prev.Effective != nil && (prev.Table != sub.Table || widens(prev.Effective, eff)) {
		// The client holds the rows of what it was served, from its
		// cursor on; rows that already existed under a newly granted
		// value are behind that cursor. A reset makes it re-bootstrap
		// the subscription from scratch (SPEC.md §4.6), and the record
		// keeps the old scopes until it does, so a lost reset is sent
		// again.
		r.served[sub.ID] = prev.Effective
		return sub.Cursor, false, e.closedSection(r, sub, ssp2.SubReset, ssp2.CodeCursorExpired)
	}
	r.served[sub.ID] = eff

	// What the read transaction found, in one variable: each variable the
	// closure below assigns would be a heap allocation of its own.
	var got struct {
		part storage.Partition
		win  storage.Window
		pin  int64
		mode pullMode
	}
	got.mode = modeIncremental
	wp := storage.WindowParams{
		Partition: r.id.Partition, Table: t.Name, Scopes: eff,
		AfterSeq: sub.Cursor, Limit: lim.commits,
	}
	// fn may run twice (storage.WindowPlanner): it only assigns.
	err = e.cfg.Store.ReadTx(ctx, func(tx storage.ReadTx) error {
		if p, ok := tx.(storage.WindowPlanner); ok && sub.BootstrapState == nil && sub.Cursor >= 0 {
			// A cursor most likely reads the log: the window may come
			// with the partition row.
			p.PlanWindow(wp)
		}
		var err error
		if got.part, err = tx.Partition(ctx, r.id.Partition); err != nil {
			return err
		}
		// In the snapshot that serves; the store answers from the
		// partition read above.
		if err := r.ticket.Check(ctx, tx); err != nil {
			return err
		}
		got.mode = chooseMode(sub, got.part)
		if got.mode == modeBootstrap {
			// A fresh bootstrap's pin, from the snapshot that chose it.
			got.pin, err = bootstrapPin(ctx, tx, got.part, t, eff, lim)
			return err
		}
		if got.mode != modeIncremental {
			return nil
		}
		// The horizon and the window come from one snapshot, so a prune
		// that overtakes the cursor is seen as a reset, never as an active
		// section with commits missing (SPEC.md §4.5 "newest" rule).
		got.win, err = tx.CommitWindow(ctx, wp)
		if err == nil && sub.Cursor < got.win.HorizonSeq {
			got.mode = modeReset
		}
		return err
	})
	if err != nil {
		return 0, false, internal("read pull window", err)
	}
	part, win, pin, mode := got.part, got.win, got.pin, got.mode
	if part.LogEpoch != r.part.LogEpoch {
		return 0, false, errEpochChanged
	}
	switch mode {
	case modeReset:
		return sub.Cursor, false, e.closedSection(r, sub, ssp2.SubReset, ssp2.CodeCursorExpired)
	case modeBootstrap:
		return e.bootstrap(ctx, r, sub, t, eff, part, pin, lim)
	}
	if err := r.enc.WriteFrame(&ssp2.SubStart{ID: sub.ID, Status: ssp2.SubActive, EffectiveScopes: eff}); err != nil {
		return 0, false, err
	}
	tables := []string{t.Name}
	for i := range win.Commits {
		c := &win.Commits[i]
		f := &ssp2.Commit{CommitSeq: c.CommitSeq, CreatedAtMs: c.CreatedAtMs, ActorID: c.ActorID, Tables: tables, Changes: make([]ssp2.Change, len(c.Changes))}
		for j := range c.Changes {
			f.Changes[j] = wireChange(&c.Changes[j])
		}
		if err := r.enc.WriteFrame(f); err != nil {
			return 0, false, err
		}
	}
	next = win.NextCursor(sub.Cursor)
	return next, true, r.enc.WriteFrame(&ssp2.SubEnd{NextCursor: next})
}

type pullMode int

const (
	modeIncremental pullMode = iota
	modeReset
	modeBootstrap
)

// chooseMode applies SPEC.md §4.6–§4.7: a resume token, a negative cursor
// or a cursor from the future bootstraps; a cursor behind the horizon
// resets; anything else reads the log.
func chooseMode(sub *ssp2.Subscription, p storage.Partition) pullMode {
	switch {
	case sub.BootstrapState != nil, sub.Cursor < 0, sub.Cursor > p.MaxCommitSeq:
		return modeBootstrap
	case sub.Cursor < p.HorizonSeq:
		return modeReset
	}
	return modeIncremental
}

// closedSection writes a revoked or reset section: no data, empty
// effective scopes, the request cursor echoed (SPEC.md §3.3, §4.6).
func (e *Engine) closedSection(r *request, sub *ssp2.Subscription, status ssp2.SubStatus, reason ssp2.Code) error {
	if err := r.enc.WriteFrame(&ssp2.SubStart{ID: sub.ID, Status: status, ReasonCode: string(reason), EffectiveScopes: map[string][]string{}}); err != nil {
		return err
	}
	return r.enc.WriteFrame(&ssp2.SubEnd{NextCursor: sub.Cursor})
}

// registeredSub is one entry of a client record's subscription list
// (SPEC.md §8.1): what a realtime connection registers on, and the
// effective scopes the subscription was last served with.
type registeredSub struct {
	ID     string              `json:"id"`
	Table  string              `json:"table"`
	Scopes map[string][]string `json:"scopes"`
	Params json.RawMessage     `json:"params,omitempty"`
	// Effective is absent for a subscription that was not served
	// (revoked, reset) and in records from before it was kept.
	Effective map[string][]string `json:"effective,omitempty"`
}

// subsRecord is a client record's subscription list, decoded: by id, and
// in its stored order.
type subsRecord struct {
	byID map[string]registeredSub
	list []registeredSub
	// canonical: encoding list gives back the stored bytes exactly (they
	// were written by encodeSubs), so a pull sending the same list keeps
	// them without encoding it again (encodeSubs).
	canonical bool
}

// sub is the stored subscription id, if the record holds one (r may be
// nil: no list).
func (r *subsRecord) sub(id string) (registeredSub, bool) {
	if r == nil {
		return registeredSub{}, false
	}
	s, ok := r.byID[id]
	return s, ok
}

// decodeSubs reads a client record's subscription list; a list that does
// not parse counts as empty (nil).
func decodeSubs(raw json.RawMessage) *subsRecord {
	var subs []registeredSub
	if len(raw) == 0 || json.Unmarshal(raw, &subs) != nil {
		return nil
	}
	out := &subsRecord{byID: make(map[string]registeredSub, len(subs)), list: subs}
	for _, s := range subs {
		out.byID[s.ID] = s
	}
	again, err := json.Marshal(subs)
	out.canonical = err == nil && bytes.Equal(again, raw)
	return out
}

// encodeSubs encodes a pull's subscription list for the client record.
// When it equals the stored list, field by field as far as the encoding
// can tell (sameSub), and the stored bytes are that list's encoding, the
// stored bytes are returned as they are: a steady client sends the same
// list on every pull, and encoding it with encoding/json only to find the
// bytes unchanged was ~1% of a push + pull round's CPU and 8 of its
// allocations.
func encodeSubs(prev *subsRecord, prevRaw json.RawMessage, subs []registeredSub) ([]byte, error) {
	if prev != nil && prev.canonical && (prev.list == nil) == (subs == nil) && len(prev.list) == len(subs) {
		same := true
		for i := range subs {
			if !sameSub(&prev.list[i], &subs[i]) {
				same = false
				break
			}
		}
		if same {
			return prevRaw, nil
		}
	}
	return json.Marshal(subs)
}

// sameSub reports whether json.Marshal encodes a and b alike: the same
// strings and raw params, scope maps with the same keys and lists (nil
// and empty apart: null and [] or {} differ), and an effective map that
// is empty in both (omitted) or alike.
func sameSub(a, b *registeredSub) bool {
	if a.ID != b.ID || a.Table != b.Table || !bytes.Equal(a.Params, b.Params) {
		return false
	}
	if len(a.Effective) != 0 || len(b.Effective) != 0 {
		if !sameScopes(a.Effective, b.Effective) {
			return false
		}
	}
	return sameScopes(a.Scopes, b.Scopes)
}

func sameScopes(a, b map[string][]string) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok || (av == nil) != (bv == nil) || !slices.Equal(av, bv) {
			return false
		}
	}
	return true
}

// subsMemo memoizes decodeSubs. A steady client's record holds the same
// subscription list, byte for byte, on every pull, and decoding it with
// encoding/json was ~2% of a push + pull round's CPU and ~6% of its
// allocations. Lists are keyed by their bytes, so nothing goes stale; the
// decoded lists are shared and never modified. It keeps at most
// subsMemoBytes of list bytes and starts over when full.
type subsMemo struct {
	mu    sync.Mutex
	bytes int
	m     map[string]*subsRecord
}

// subsMemoBytes bounds the list bytes a subsMemo keeps (the decoded maps
// take a few times that); a list over an eighth of it is not kept.
const subsMemoBytes = 256 << 10

// get is decodeSubs(raw), from the memo when raw was decoded before.
func (s *subsMemo) get(raw json.RawMessage) *subsRecord {
	if len(raw) == 0 {
		return nil
	}
	s.mu.Lock()
	subs, ok := s.m[string(raw)]
	s.mu.Unlock()
	if ok {
		return subs
	}
	subs = decodeSubs(raw)
	if len(raw) > subsMemoBytes/8 {
		return subs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || s.bytes+len(raw) > subsMemoBytes {
		s.m, s.bytes = map[string]*subsRecord{}, 0
	}
	if _, ok := s.m[string(raw)]; !ok {
		s.m[string(raw)] = subs
		s.bytes += len(raw)
	}
	return subs
}

// widens reports whether effective scopes now match a row that was did
// not: a variable of was is unconstrained in now, or now allows a value
// was did not.
func widens(was, now map[string][]string) bool {
	for k, old := range was {
		vals, ok := now[k]
		if !ok {
			return true
		}
		for _, v := range vals {
			if !slices.Contains(old, v) {
				return true
			}
		}
	}
	return false
}

// saveClient stores the client record after a pull: the minimum of the
// active sections' cursors (else the previous cursor) and the pull's
// subscription list, which replaces the old one (SPEC.md §4.5, §8.1). An
// unchanged record that is still fresh is not rewritten, keeping steady
// pulls free of writes, and a record whose cursor alone moved on is
// advanced (storage.Store.ClientAdvance) rather than rewritten.
func (e *Engine) saveClient(ctx context.Context, r *request, cursors []int64) error {
	c := storage.Client{
		Partition:   r.id.Partition,
		ClientID:    r.req.Header.ClientID,
		ActorID:     r.id.ActorID,
		WireVersion: r.req.WireVersion,
		Cursor:      r.client.Cursor,
		UpdatedAtMs: r.now,
	}
	if len(cursors) > 0 {
		c.Cursor = slices.Min(cursors)
	}
	subs := make([]registeredSub, len(r.req.Subscriptions))
	for i, s := range r.req.Subscriptions {
		subs[i] = registeredSub{ID: s.ID, Table: s.Table, Scopes: s.Scopes, Params: s.Params, Effective: r.served[s.ID]}
	}
	b, err := encodeSubs(r.registered, r.client.Subscriptions, subs)
	if err != nil {
		return internal("encode subscriptions", err)
	}
	c.Subscriptions = b
	same := r.client.WireVersion == c.WireVersion && bytes.Equal(r.client.Subscriptions, c.Subscriptions)
	switch {
	case same && r.client.Cursor == c.Cursor && r.now-r.client.UpdatedAtMs < clientRefreshMs:
		return nil
	case same && c.Cursor > r.client.Cursor:
		// Only the cursor moved on, as on every steady push+pull round:
		// an advance, which the store may batch into a later write. Its
		// loss in a crash leaves the older cursor, which keeps more log
		// and replays more deltas, never fewer; the subscription list,
		// which decides resets, is never written this way.
		if err := e.cfg.Store.ClientAdvance(ctx, storage.ClientAckParams{
			Partition: c.Partition, ClientID: c.ClientID, ActorID: c.ActorID,
			LogEpoch: r.part.LogEpoch, Cursor: c.Cursor, NowMs: c.UpdatedAtMs,
		}); err != nil {
			return internal("advance client cursor", err)
		}
		return nil
	}
	if err := e.cfg.Store.ClientPut(ctx, c); err != nil {
		return internal("store client record", err)
	}
	return nil
}

// clientRefreshMs bounds how stale an unchanged client record's
// updated-at may get; it feeds the 14-day active window of pruning, so a
// minute is far below anything that matters.
const clientRefreshMs = 60_000
