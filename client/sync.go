package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// Result reports what one or more rounds did.
type Result struct {
	Rounds int
	// Pushed lists the commits the server answered, in order.
	Pushed []PushOutcome
	// Rejected lists commits that left the outbox without applying:
	// server rejections and local drops into revoked scopes.
	Rejected []*Rejection
	// Commits and Changes count the COMMIT frames and change records
	// applied; SegmentRows the rows applied from segments, Segments and
	// Downloads the segments applied and those fetched by reference.
	Commits     int
	Changes     int
	Segments    int
	Downloads   int
	SegmentRows int64
	// Images counts the SQLite-image segments applied (also counted in
	// Segments), SignedDownloads the segments fetched by signed URL.
	Images          int
	SignedDownloads int
	// CommitSeqs are the commitSeqs of the applied COMMIT frames, in the
	// order they were applied.
	CommitSeqs []int64
	// SocketRounds counts the rounds that ran over the realtime socket
	// (SPEC.md §8.7); the others went to POST /sync.
	SocketRounds int
	// EpochReset is set when a round ran the log reset of SPEC.md §2.1
	// (first contact included).
	EpochReset bool
	// Revoked and Reset name the subscriptions answered revoked and reset
	// (cursor expired).
	Revoked []string
	Reset   []string
}

// PushOutcome is the server's answer to one pushed commit.
type PushOutcome struct {
	ClientCommitID string
	Status         ssp2.PushStatus
	CommitSeq      int64 // applied and cached only
	// Retry is set when the commit stays queued: a rejection with the
	// retryable sync.idempotency_cache_miss (SPEC.md §7.2).
	Retry bool
}

func (r *Result) add(o Result) {
	r.Rounds += o.Rounds
	r.Pushed = append(r.Pushed, o.Pushed...)
	r.Rejected = append(r.Rejected, o.Rejected...)
	r.Commits += o.Commits
	r.Changes += o.Changes
	r.Segments += o.Segments
	r.Downloads += o.Downloads
	r.SegmentRows += o.SegmentRows
	r.Images += o.Images
	r.SignedDownloads += o.SignedDownloads
	r.CommitSeqs = append(r.CommitSeqs, o.CommitSeqs...)
	r.SocketRounds += o.SocketRounds
	r.EpochReset = r.EpochReset || o.EpochReset
	r.Revoked = append(r.Revoked, o.Revoked...)
	r.Reset = append(r.Reset, o.Reset...)
}

// Sync runs one round: it pushes the head of the outbox, pulls every
// registered subscription and applies the response as it streams in. A
// client without an accepted log epoch first acquires one (a request
// without an epoch may carry no pushes), and a round answered with
// resetRequired runs the log reset and is sent again.
//
// A request-level failure is an *Error (or a transport error); pushed
// commits without an answer stay queued and are retried under the same
// clientCommitId. A failed subscription section is a *SubscriptionError,
// returned after the rest of the response was applied.
//
// While a realtime session is connected (Client.NewRealtime) the round
// runs over its socket, else over POST /sync: the same request bytes,
// the same apply. After a round the socket acknowledges the cursor floor
// (SPEC.md §8.2).
func (c *Client) Sync(ctx context.Context) (Result, error) {
	res, err := c.sync(ctx)
	c.notifyApplied(res)
	return res, err
}

func (c *Client) sync(ctx context.Context) (Result, error) {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	// The socket live as the round begins: deltas it dropped before this
	// point are covered by the round, later ones are not.
	s := c.live.Load()
	mark := s.dropMark()
	var res Result
	for range 3 {
		c.mu.Lock()
		stopped := c.stopped
		c.mu.Unlock()
		if stopped != nil {
			return res, stopped
		}
		again, err := c.round(ctx, &res)
		if err == nil && again {
			continue
		}
		var se *SubscriptionError
		if err == nil || errors.As(err, &se) {
			c.roundDone(s, mark)
		}
		return res, err
	}
	return res, errors.New("sync: the server keeps answering with a log reset")
}

// roundDone tells the socket that was live for a whole round that the
// round completed, with the cursor floor to acknowledge.
func (c *Client) roundDone(s *socket, mark int64) {
	if s == nil || c.live.Load() != s {
		return
	}
	floor, _, ok := c.cursorFloor()
	s.roundDone(mark, floor, ok)
}

// cursorFloor is the minimum and maximum cursor of the subscriptions that
// are active, not bootstrapping and synced at least once — the ack point
// after a round (SPEC.md §8.2). ok is false when there is none.
func (c *Client) cursorFloor() (floor, top int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.subs {
		if s.Status != statusActive || s.BootstrapState != nil || s.Cursor < 0 {
			continue
		}
		if !ok {
			floor, top, ok = s.Cursor, s.Cursor, true
			continue
		}
		floor, top = min(floor, s.Cursor), max(top, s.Cursor)
	}
	return floor, top, ok
}

// notifyApplied calls Config.AppliedFunc when res changed the replica.
func (c *Client) notifyApplied(res Result) {
	if c.cfg.AppliedFunc != nil && (res.Commits > 0 || res.Segments > 0 || res.EpochReset || len(res.Revoked) > 0) {
		c.cfg.AppliedFunc(res)
	}
}

// SyncUntilIdle runs rounds until one delivers no commits while the outbox
// is empty and no subscription is bootstrapping, and returns what they did
// together. It stops at the first error, and after Config.MaxRounds.
func (c *Client) SyncUntilIdle(ctx context.Context) (Result, error) {
	var total Result
	for range c.cfg.MaxRounds {
		res, err := c.Sync(ctx)
		total.add(res)
		if err != nil {
			return total, err
		}
		if c.idle(res) {
			return total, nil
		}
		if stuck := retryOnly(res); stuck && res.Commits == 0 && res.SegmentRows == 0 {
			return total, &Error{Op: "sync", Code: ssp2.CodeIdempotencyCacheMiss, Retryable: true,
				Message: "the server cannot read the stored results of queued commits; retry later"}
		}
	}
	return total, fmt.Errorf("sync: not idle after %d rounds", c.cfg.MaxRounds)
}

// idle reports whether nothing more is pending after a round.
func (c *Client) idle(res Result) bool {
	if res.Commits > 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.outbox) > 0 {
		return false
	}
	for _, s := range c.subs {
		if s.Status != statusRevoked && (s.Cursor < 0 || s.BootstrapState != nil) {
			return false
		}
	}
	return true
}

// retryOnly reports whether every pushed commit of a round stayed queued.
func retryOnly(res Result) bool {
	if len(res.Pushed) == 0 {
		return false
	}
	for _, p := range res.Pushed {
		if !p.Retry {
			return false
		}
	}
	return true
}

// sentSub is one subscription as a request carried it.
type sentSub struct {
	s      *SubscriptionState
	id     string
	table  *schema.Table
	scopes map[string][]string
	cursor int64
	token  json.RawMessage
}

// round sends one request and applies its response. again reports a
// header-only log reset: the caller sends the round again.
func (c *Client) round(ctx context.Context, res *Result) (again bool, err error) {
	c.mu.Lock()
	hdr := &ssp2.ReqHeader{ClientID: c.clientID, SchemaVersion: c.schema.Version}
	if c.epoch != "" {
		e := c.epoch
		hdr.LogEpoch = &e
	}
	frames := []ssp2.Frame{hdr}
	var pushed []*PendingCommit
	if hdr.LogEpoch != nil { // an epoch acquisition carries no pushes (SPEC.md §2.1)
		ops := 0
		for _, pc := range c.outbox {
			if ops+len(pc.Operations) > c.cfg.MaxOperations && len(pushed) > 0 {
				break
			}
			ops += len(pc.Operations)
			pushed = append(pushed, pc)
			frames = append(frames, c.pushFrame(pc))
		}
	}
	p := c.cfg.Pull
	frames = append(frames, &ssp2.PullHeader{LimitCommits: p.LimitCommits, LimitSnapshotRows: p.LimitSnapshotRows, MaxSnapshotPages: p.MaxSnapshotPages, Accept: p.Accept})
	var sent []sentSub
	for _, s := range c.subs {
		if s.Status == statusRevoked {
			continue // a revoked subscription stops pulling (SPEC.md §3.3)
		}
		t, _ := c.schema.Table(s.Table)
		ss := sentSub{s: s, id: s.ID, table: t, scopes: s.Scopes, cursor: s.Cursor, token: s.BootstrapState}
		sent = append(sent, ss)
		frames = append(frames, &ssp2.Subscription{ID: s.ID, Table: s.Table, Scopes: s.Scopes, Cursor: s.Cursor, BootstrapState: s.BootstrapState})
	}
	c.mu.Unlock()

	body, err := (&ssp2.Message{WireVersion: c.cfg.WireVersion, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
	if err != nil {
		return false, fmt.Errorf("sync: encode request: %w", err)
	}
	res.Rounds++
	rc, overSocket, err := c.exchange(ctx, body)
	if err != nil {
		return false, err
	}
	if overSocket {
		res.SocketRounds++
	}
	defer rc.Close()
	r := &roundState{c: c, ctx: ctx, res: res, pushed: pushed, sent: sent}
	again, err = r.run(rc)
	if r.dirty {
		if serr := c.save(context.WithoutCancel(ctx)); serr != nil && err == nil {
			err = fmt.Errorf("sync: %w", serr)
		}
	}
	return again, err
}

// exchange sends one request over the realtime socket when one is
// connected, else to POST /sync, and returns the response stream. A
// request the socket could not send goes to POST /sync: a push it may
// have delivered replays under the same clientCommitIds, answered cached.
func (c *Client) exchange(ctx context.Context, body []byte) (rc io.ReadCloser, overSocket bool, err error) {
	if s := c.live.Load(); s != nil {
		if rc, err := s.roundTrip(ctx, body); err == nil {
			return rc, true, nil
		}
	}
	rc, err = c.post(ctx, body)
	return rc, false, err
}

func (c *Client) pushFrame(pc *PendingCommit) *ssp2.PushCommit {
	f := &ssp2.PushCommit{ClientCommitID: pc.ClientCommitID, Operations: make([]ssp2.Operation, len(pc.Operations))}
	for i := range pc.Operations {
		o := &pc.Operations[i]
		f.Operations[i] = ssp2.Operation{Table: o.Table, RowID: o.RowID, Op: o.Op, BaseVersion: o.BaseVersion, Payload: c.pushPayload(o)}
	}
	return f
}

// roundState applies one streamed response.
type roundState struct {
	c      *Client
	ctx    context.Context
	res    *Result
	pushed []*PendingCommit
	next   int // next PUSH_RESULT expected
	last   *Rejection
	sent   []sentSub
	subIdx int
	sec    *section
	dirty  bool // state changed since the last save
	fails  []error
	// delta marks a realtime delta (SPEC.md §8.2) applied through the
	// same path: sections name subscriptions by id, not request order;
	// duplicates and sections this client cannot apply are skipped.
	delta bool
	// needRound reports a delta section skipped that a round must repair;
	// acked is the highest SUB_END.nextCursor a delta applied.
	needRound bool
	acked     int64
	// scratch reused across frames and blocks
	batch   []pendingRow
	segRows []segRow
	idBuf   []byte
}

// segRow is one segment row gathered from a block before it is applied.
type segRow struct {
	row            []byte // aliases the segment reader's block
	version        int64
	idStart, idEnd int // the rendered rowId in the id buffer
}

// section is the open subscription section.
type section struct {
	sub      *sentSub
	start    *ssp2.SubStart
	fresh    bool // a fresh bootstrap: the first page clears (SPEC.md §5.6)
	segments int
	err      error // the section failed: skip to SUB_END, persist nothing
	skip     bool  // a delta section not to apply: skip to SUB_END, persist nothing
}

type pendingRow struct {
	id     string
	e      rowEntry
	delete bool
}

func (r *roundState) run(body io.Reader) (again bool, err error) {
	mr, err := ssp2.NewMessageReader(body)
	if err != nil {
		return false, fmt.Errorf("sync: read response: %w", err)
	}
	if want := r.c.cfg.WireVersion; mr.Kind() != ssp2.KindResponse || mr.WireVersion() != want {
		return false, fmt.Errorf("sync: response is a wire version %d %s, want a version %d response", mr.WireVersion(), mr.Kind(), want)
	}
	var inBand *Error
	for {
		f, err := mr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// Abort rule (SPEC.md §1.4 rule 5): the open section's SUB_END
			// values are never persisted; applied frames stay.
			r.sec = nil
			return false, fmt.Errorf("sync: read response: %w", err)
		}
		switch f := f.(type) {
		case *ssp2.RespHeader:
			reset, err := r.header(f)
			if errors.Is(err, errEpochWithoutReset) {
				// A request-level failure answered in band names the
				// server's epoch: report the ERROR that follows it.
				if next, nerr := mr.Next(); nerr == nil {
					if ef, ok := next.(*ssp2.ErrorFrame); ok {
						return false, frameError(ef)
					}
				}
			}
			if err != nil || reset {
				return reset, err
			}
		case *ssp2.PushResult:
			if err := r.pushResult(f); err != nil {
				return false, err
			}
		case *ssp2.PushResultDetails:
			r.details(f)
		case *ssp2.SubStart:
			if err := r.subStart(f); err != nil {
				return false, err
			}
		case *ssp2.Commit:
			r.apply(func() error { return r.commit(f) })
		case *ssp2.SegmentInline:
			r.apply(func() error { return r.segment(f.Payload, r.sec.segments == 0) })
		case *ssp2.SegmentRef:
			r.apply(func() error { return r.segmentRef(f) })
		case *ssp2.SubEnd:
			if err := r.subEnd(f); err != nil {
				return false, err
			}
		case *ssp2.ErrorFrame:
			r.sec = nil
			inBand = frameError(f)
		case *ssp2.Lease:
			r.c.setLease(Lease{ID: f.LeaseID, ExpiresAtMs: f.ExpiresAtMs})
		}
		// Unknown frames carry nothing this client uses.
	}
	if inBand != nil {
		return false, inBand
	}
	if r.subIdx != len(r.sent) || r.next != len(r.pushed) {
		return false, fmt.Errorf("sync: response answered %d of %d commits and %d of %d subscriptions", r.next, len(r.pushed), r.subIdx, len(r.sent))
	}
	return false, errors.Join(r.fails...)
}

// header handles RESP_HEADER: the schema floor stops the client; a reset
// runs the log reset (SPEC.md §1.6, §2.1).
func (r *roundState) header(h *ssp2.RespHeader) (reset bool, err error) {
	c := r.c
	if r.delta {
		c.mu.Lock()
		same := h.LogEpoch == c.epoch
		c.mu.Unlock()
		if h.ResetRequired || h.RequiredSchemaVersion != nil || !same {
			return false, errDeltaDiscontinuous
		}
		return false, nil
	}
	if h.RequiredSchemaVersion != nil {
		e := &SchemaUnsupportedError{ClientVersion: c.schema.Version, RequiredVersion: *h.RequiredSchemaVersion}
		if h.LatestSchemaVersion != nil {
			e.LatestVersion = *h.LatestSchemaVersion
		}
		c.mu.Lock()
		c.stopped = e
		c.mu.Unlock()
		return false, e
	}
	c.mu.Lock()
	same := h.LogEpoch == c.epoch
	c.mu.Unlock()
	if !h.ResetRequired && same {
		return false, nil
	}
	if !h.ResetRequired {
		return false, fmt.Errorf("%w: %q", errEpochWithoutReset, h.LogEpoch)
	}
	c.resetLog(h.LogEpoch)
	r.res.EpochReset = true
	r.dirty = true
	return true, nil
}

// errEpochWithoutReset: a response under another log epoch that does not
// ask for the reset.
var errEpochWithoutReset = errors.New("sync: the server answered another log epoch without resetRequired")

// resetLog runs the log reset of SPEC.md §2.1: adopt the epoch, discard
// the synced rows, cursors, resume tokens and effective scopes, and start
// every registration again from -1. The clientId and the outbox stay.
func (c *Client) resetLog(epoch string) {
	c.rep.clear()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch = epoch
	for _, s := range c.subs {
		s.Cursor, s.BootstrapState, s.Effective, s.Status, s.Reason = -1, nil, nil, "", ""
	}
}

func (r *roundState) pushResult(f *ssp2.PushResult) error {
	if r.next >= len(r.pushed) || r.pushed[r.next].ClientCommitID != f.ClientCommitID {
		return fmt.Errorf("sync: unexpected PUSH_RESULT for commit %q", f.ClientCommitID)
	}
	pc := r.pushed[r.next]
	r.next++
	r.last = nil
	out := PushOutcome{ClientCommitID: f.ClientCommitID, Status: f.Status}
	if f.CommitSeq != nil {
		out.CommitSeq = *f.CommitSeq
	}
	switch f.Status {
	case ssp2.PushApplied, ssp2.PushCached:
		r.drop(pc)
	case ssp2.PushRejected:
		rej := r.c.rejection(pc, f)
		if rej.Code == ssp2.CodeIdempotencyCacheMiss {
			out.Retry = true // a serving failure, not an outcome: stays queued
			break
		}
		r.drop(pc)
		r.res.Rejected = append(r.res.Rejected, rej)
		r.last = rej
	}
	r.res.Pushed = append(r.res.Pushed, out)
	return nil
}

// drop removes a commit with a terminal result from the outbox.
func (r *roundState) drop(pc *PendingCommit) {
	c := r.c
	c.mu.Lock()
	c.outbox = slices.DeleteFunc(c.outbox, func(p *PendingCommit) bool { return p == pc })
	c.mu.Unlock()
	r.dirty = true
}

// rejection builds the Rejection of a rejected PUSH_RESULT from its
// terminating (first non-applied) result record.
func (c *Client) rejection(pc *PendingCommit, f *ssp2.PushResult) *Rejection {
	rej := &Rejection{ClientCommitID: f.ClientCommitID, Commit: *pc}
	for _, o := range f.Results {
		if o.Status == ssp2.OpApplied {
			continue
		}
		rej.OpIndex, rej.Code, rej.Message, rej.Retryable = o.OpIndex, ssp2.Code(o.Code), o.Message, o.Retryable
		if o.Status == ssp2.OpConflict {
			rej.Conflict = &Conflict{ServerVersion: o.ServerVersion}
			if o.OpIndex >= 0 && int(o.OpIndex) < len(pc.Operations) {
				if t, ok := c.schema.Table(pc.Operations[o.OpIndex].Table); ok {
					rej.Conflict.ServerRow, _ = decodeValues(t, o.ServerRow)
					rej.Conflict.Columns = conflictColumns(t, o.ConflictColumns)
				}
			}
		}
		return rej
	}
	rej.Code = ssp2.CodeInternalError
	rej.Message = "rejected without a result record"
	return rej
}

func (r *roundState) details(f *ssp2.PushResultDetails) {
	if r.last == nil || r.last.ClientCommitID != f.ClientCommitID {
		return
	}
	for _, e := range f.Entries {
		if e.OpIndex == r.last.OpIndex {
			r.last.Details = append(json.RawMessage(nil), e.DetailsJSON...)
		}
	}
}

func (r *roundState) subStart(f *ssp2.SubStart) error {
	r.last = nil
	if r.delta {
		return r.deltaSection(f)
	}
	if r.subIdx >= len(r.sent) || r.sent[r.subIdx].id != f.ID {
		return fmt.Errorf("sync: SUB_START for %q out of request order", f.ID)
	}
	sub := &r.sent[r.subIdx]
	r.subIdx++
	r.sec = &section{sub: sub, start: f, fresh: f.Status == ssp2.SubActive && f.Bootstrap && sub.cursor < 0 && sub.token == nil}
	if f.Status == ssp2.SubActive && len(f.EffectiveScopes) == 0 {
		r.sec.err = errors.New("an active section without effective scopes")
	}
	return nil
}

// deltaSection opens a delta's section. Only a subscription that is
// active, synced and not bootstrapping applies it; for another one the
// section is skipped and a round repairs it (SPEC.md §8.2). A section of
// a subscription dropped here is skipped: the next pull unregisters it.
func (r *roundState) deltaSection(f *ssp2.SubStart) error {
	if f.Status != ssp2.SubActive || f.Bootstrap {
		return fmt.Errorf("sync: delta section for %q is not an active incremental section", f.ID)
	}
	c := r.c
	var ss sentSub
	applicable, known := false, false
	c.mu.Lock()
	for _, s := range c.subs {
		if s.ID == f.ID {
			t, _ := c.schema.Table(s.Table)
			ss = sentSub{s: s, id: s.ID, table: t, scopes: s.Scopes, cursor: s.Cursor, token: s.BootstrapState}
			known = true
			applicable = s.Status == statusActive && s.BootstrapState == nil && s.Cursor >= 0
			r.needRound = r.needRound || (!applicable && s.Status != statusRevoked)
			break
		}
	}
	c.mu.Unlock()
	r.sent = append(r.sent, ss)
	r.subIdx++
	r.sec = &section{sub: &r.sent[len(r.sent)-1], start: f, skip: !applicable}
	if known && len(f.EffectiveScopes) == 0 {
		r.sec.err = errors.New("an active section without effective scopes")
	}
	return nil
}

// errDeltaDiscontinuous: a delta under another log epoch than the
// client's, or one asking for a reset: a round decides.
var errDeltaDiscontinuous = errors.New("sync: delta does not continue the client's log epoch")

// apply runs one data frame of the open section unless it already failed.
func (r *roundState) apply(fn func() error) {
	s := r.sec
	if s == nil || s.err != nil || s.skip {
		return
	}
	if s.start.Status != ssp2.SubActive {
		s.err = fmt.Errorf("data in a %s section", s.start.Status)
		return
	}
	if err := fn(); err != nil {
		s.err = err
	}
}

// commit applies one COMMIT frame as a unit.
func (r *roundState) commit(f *ssp2.Commit) error {
	if r.sec.start.Bootstrap {
		return errors.New("COMMIT in a bootstrap section")
	}
	if r.delta && f.CommitSeq <= r.sec.sub.cursor {
		// Applied already (by a round that overtook the delta): a
		// duplicate advances nothing and is not a drop (SPEC.md §8.2).
		r.sec.skip = true
		return nil
	}
	batch := r.batch[:0]
	tables := make([]*tableRows, len(f.Tables))
	for i, name := range f.Tables {
		tr := r.c.rep.tables[name]
		if tr == nil {
			return &Error{Op: "apply commit", Code: ssp2.CodeSchemaMismatch, Message: fmt.Sprintf("commit %d names unknown table %q", f.CommitSeq, name)}
		}
		tables[i] = tr
	}
	for i := range f.Changes {
		ch := &f.Changes[i]
		tr := tables[ch.TableIndex]
		if ch.Op == ssp2.OpDelete {
			batch = append(batch, pendingRow{id: ch.RowID, delete: true})
			continue
		}
		if *ch.RowVersion < 1 {
			return fmt.Errorf("commit %d: row %q has version %d", f.CommitSeq, ch.RowID, *ch.RowVersion)
		}
		if err := tr.t.Codec.ValidateRow(ch.Row); err != nil {
			return fmt.Errorf("commit %d: row %q: %w", f.CommitSeq, ch.RowID, err)
		}
		batch = append(batch, pendingRow{id: ch.RowID, e: rowEntry{version: *ch.RowVersion, data: bytes.Clone(ch.Row)}})
	}
	rep := r.c.rep
	rep.mu.Lock()
	for i := range batch {
		tr := tables[f.Changes[i].TableIndex]
		if batch[i].delete {
			tr.del(batch[i].id)
		} else {
			tr.put(batch[i].id, batch[i].e)
		}
	}
	rep.mu.Unlock()
	r.batch = batch[:0]
	r.res.CommitSeqs = append(r.res.CommitSeqs, f.CommitSeq)
	r.res.Commits++
	r.res.Changes += len(f.Changes)
	return nil
}

// segmentRef downloads a referenced segment — a rows page or a SQLite
// image — and applies it.
func (r *roundState) segmentRef(f *ssp2.SegmentRef) error {
	accept := r.c.cfg.Pull.Accept
	switch {
	case f.MediaType == ssp2.MediaSQLite && accept&ssp2.AcceptSQLite == 0,
		f.MediaType != ssp2.MediaRows && f.MediaType != ssp2.MediaSQLite:
		return ssp2.Errorf(ssp2.CodeInvalidRequest, "SEGMENT_REF of media type %s was not accepted", f.MediaType)
	case f.MediaType == ssp2.MediaSQLite && (f.RowCursor != nil || f.NextRowCursor != nil):
		return ssp2.Errorf(ssp2.CodeInvalidRequest, "a sqlite SEGMENT_REF carries row cursors; an image is its whole table")
	}
	if f.URL != nil && accept&ssp2.AcceptSignedURLs == 0 {
		return ssp2.Errorf(ssp2.CodeInvalidRequest, "SEGMENT_REF carries a url, but signed URLs were not accepted")
	}
	if f.Table != r.sec.sub.table.Name {
		return ssp2.Errorf(ssp2.CodeInvalidRequest, "SEGMENT_REF for table %q in a subscription to %q", f.Table, r.sec.sub.table.Name)
	}
	if want := ssp2.ScopeDigest(r.sec.start.EffectiveScopes); f.ScopeDigest != want {
		return ssp2.Errorf(ssp2.CodeInvalidRequest, "SEGMENT_REF scope digest %s does not match the effective scopes (%s)", f.ScopeDigest, want)
	}
	data, err := r.c.download(r.ctx, f, r.sec.sub.scopes)
	if err != nil {
		return err
	}
	r.res.Downloads++
	if f.URL != nil {
		r.res.SignedDownloads++
	}
	if f.MediaType == ssp2.MediaSQLite {
		return r.image(data, f)
	}
	return r.segment(data, f.RowCursor == nil)
}

// segment applies one rows segment, block by block; each block is one
// unit (SPEC.md §5.2). first marks the table's first page, which a fresh
// bootstrap clears the subscription's rows before (§5.6).
func (r *roundState) segment(data []byte, first bool) error {
	s := r.sec
	if !s.start.Bootstrap {
		return errors.New("segment in an incremental section")
	}
	s.segments++
	t := s.sub.table
	sr, err := ssp2.NewSegmentReader(bytes.NewReader(data))
	if err != nil {
		return err
	}
	if h := sr.Header(); h.Table != t.Name || h.SchemaVersion != r.c.schema.Version || !slices.Equal(h.Columns, t.WireColumns()) {
		return &Error{Op: "apply segment", Code: ssp2.CodeSchemaMismatch,
			Message: fmt.Sprintf("segment for %s v%d does not match table %s v%d", h.Table, h.SchemaVersion, t.Name, r.c.schema.Version)}
	}
	if s.fresh && first {
		if _, ok := r.c.rep.purge(t.Name, s.start.EffectiveScopes); !ok {
			// Fail closed: never clear by approximation (SPEC.md §5.6).
			return &Error{Op: "apply segment", Code: ssp2.CodeScopeRevoked, Message: "effective scopes name a variable without a scope column in " + t.Name}
		}
	}
	pk, pkType := t.PKIndex, t.Columns[t.PKIndex].Type
	tr := r.c.rep.tables[t.Name]
	for sr.NextBlock() {
		// Two passes per block: gather the rows (aliasing the reader's
		// block buffer) and their rendered ids, then copy all row bytes
		// into one arena and all ids into one string. A block costs two
		// allocations instead of two per row; the price is that an arena
		// lives until the last of its rows is replaced or deleted.
		rows, ids := r.segRows[:0], r.idBuf[:0]
		size := 0
		for sr.Next() {
			v := sr.RowValues()[pk]
			if v.Null {
				return errors.New("segment row without a primary key")
			}
			start := len(ids)
			if ids, err = appendRowID(ids, pkType, v); err != nil {
				return err
			}
			row := sr.Row()
			size += len(row)
			rows = append(rows, segRow{row: row, version: sr.ServerVersion(), idStart: start, idEnd: len(ids)})
		}
		arena, idStr := make([]byte, 0, size), string(ids)
		r.c.rep.mu.Lock()
		for i := range rows {
			a := len(arena)
			arena = append(arena, rows[i].row...)
			tr.putOrdered(idStr[rows[i].idStart:rows[i].idEnd], rowEntry{version: rows[i].version, data: arena[a:len(arena):len(arena)]})
		}
		r.c.rep.mu.Unlock()
		r.res.SegmentRows += int64(len(rows))
		clear(rows) // drop references into the reader's buffer
		r.segRows, r.idBuf = rows[:0], ids[:0]
	}
	if err := sr.Err(); err != nil {
		return err
	}
	r.res.Segments++
	return nil
}

// subEnd closes the section: only now may its cursor, resume token and
// effective scopes be persisted (SPEC.md §1.4 rule 4).
func (r *roundState) subEnd(f *ssp2.SubEnd) error {
	s := r.sec
	r.sec = nil
	if s == nil {
		return errors.New("sync: SUB_END without SUB_START")
	}
	if s.err != nil {
		r.fails = append(r.fails, &SubscriptionError{ID: s.sub.id, Err: s.err})
		return nil
	}
	if s.skip {
		return nil
	}
	c, st := r.c, s.sub.s
	if r.delta {
		r.acked = max(r.acked, f.NextCursor)
	}
	switch s.start.Status {
	case ssp2.SubRevoked:
		c.mu.Lock()
		eff := st.Effective
		c.mu.Unlock()
		if len(eff) > 0 {
			if _, ok := c.rep.purge(s.sub.table.Name, eff); !ok {
				r.fails = append(r.fails, &SubscriptionError{ID: s.sub.id, Err: &Error{Op: "purge", Code: ssp2.CodeScopeRevoked,
					Message: "effective scopes name a variable without a scope column in " + s.sub.table.Name}})
			}
			r.dropRevoked(s.sub.table, eff)
		}
		c.mu.Lock()
		st.Status, st.Reason, st.BootstrapState, st.Effective = statusRevoked, s.start.ReasonCode, nil, nil
		c.mu.Unlock()
		r.res.Revoked = append(r.res.Revoked, s.sub.id)
	case ssp2.SubReset:
		// A staleness signal: rows stay until the fresh bootstrap's first
		// page replaces them (SPEC.md §4.6).
		c.mu.Lock()
		st.Cursor, st.BootstrapState, st.Reason = -1, nil, s.start.ReasonCode
		c.mu.Unlock()
		r.res.Reset = append(r.res.Reset, s.sub.id)
	default:
		var tok json.RawMessage
		if f.BootstrapState != nil {
			tok = bytes.Clone(f.BootstrapState)
		}
		next := f.NextCursor
		if r.delta {
			next = max(next, s.sub.cursor) // a delta never moves a cursor back
		}
		c.mu.Lock()
		st.Cursor, st.BootstrapState, st.Effective = next, tok, s.start.EffectiveScopes
		st.Status, st.Reason = statusActive, ""
		c.mu.Unlock()
	}
	r.dirty = false
	if err := c.save(r.ctx); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

// dropRevoked drops queued commits with an upsert that provably lands in
// revoked effective scopes: whole commits, never single operations
// (SPEC.md §3.3). Delete-only commits replay and meet the server's answer.
func (r *roundState) dropRevoked(t *schema.Table, eff map[string][]string) {
	m, ok := newScopeMatcher(t, eff)
	if !ok {
		return
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.outbox = slices.DeleteFunc(c.outbox, func(pc *PendingCommit) bool {
		for i := range pc.Operations {
			o := &pc.Operations[i]
			if o.Op != ssp2.OpUpsert || o.Table != t.Name {
				continue
			}
			// A patch without its scope columns does not provably land in
			// the scope; the server answers it.
			vals, present, err := decodePending(t, o)
			if err == nil && m.covered(present) && m.match(vals) {
				r.res.Rejected = append(r.res.Rejected, &Rejection{ClientCommitID: pc.ClientCommitID, Code: ssp2.CodeScopeRevoked,
					Message: "writes into a revoked scope", Dropped: true, Commit: *pc})
				r.dirty = true
				return true
			}
		}
		return false
	})
}
