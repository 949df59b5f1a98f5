package loadgen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/syncnode/syncnode/loadfix"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// wireVersion is the SSP2 wire version the virtual clients speak.
const wireVersion = 2

// The fixture the scenarios assume (see the package comment).
var (
	fixtureSchema = loadfix.Schema()
	tasks         = mustTable(fixtureSchema, "tasks")
)

// stormProject is the seeded project every bootstrap reads.
const stormProject = loadfix.Project

func mustTable(s *schema.Schema, name string) *schema.Table {
	t, ok := s.Table(name)
	if !ok {
		panic("loadgen: the fixture schema has no table " + name)
	}
	return t
}

// clientProject is the project a virtual user owns: distinct scope keys
// per user, the way real tenants contend.
func clientProject(vu int) string { return fmt.Sprintf("vu-%05d", vu) }

// Accept bits: the rows lanes every client takes, plus the image lane a
// bootstrap-storm client asks for (a server without images ignores it).
const (
	acceptRows  = ssp2.AcceptInlineRows | ssp2.AcceptExternalRows
	acceptImage = acceptRows | ssp2.AcceptSQLite
)

// pullLimits is one PULL_HEADER.
type pullLimits struct {
	commits, snapshotRows, pages int32
	accept                       uint8
}

// The pull headers of the scenarios' rounds.
var (
	// pullOnly is a plain read round.
	pullOnly = pullLimits{commits: 0, snapshotRows: 5_000, pages: 1, accept: acceptRows}
	// pushPullLimits is the pull half of a write round.
	pushPullLimits = pullLimits{commits: 100, snapshotRows: 5_000, pages: 1, accept: acceptRows}
	// socketPull is a realtime client's catch-up round.
	socketPull = pullLimits{commits: 200, snapshotRows: 10_000, pages: 1, accept: acceptRows}
)

// subState is one subscription of a virtual client.
type subState struct {
	frame  ssp2.Subscription // id, table, scopes, cursor and resume token as the next request sends them
	scopes string            // canonical requested scopes: the X-Syncular-Scopes of segment downloads
	synced bool              // a SUB_END was processed
}

// vclient is a protocol-level virtual client: it builds requests into
// reused frames and buffers, and accounts each response frame by frame
// with the streaming reader, keeping no rows — only what a client must
// check and carry forward: errors, push outcomes, cursors, resume tokens
// and row counts.
type vclient struct {
	id    string
	epoch string
	subs  []*subState
	seq   int64

	hdr    ssp2.ReqHeader
	push   ssp2.PushCommit
	op     [1]ssp2.Operation
	pull   ssp2.PullHeader
	msg    ssp2.Message
	frames []ssp2.Frame
	body   []byte
	vals   []ssp2.Value
	row    []byte
	text   []byte
}

func newVClient(id, epoch string) *vclient {
	c := &vclient{id: id, epoch: epoch, vals: make([]ssp2.Value, len(tasks.Columns))}
	c.hdr = ssp2.ReqHeader{ClientID: id, SchemaVersion: fixtureSchema.Version, LogEpoch: &c.epoch}
	c.push.Operations = c.op[:]
	c.msg = ssp2.Message{WireVersion: wireVersion, Kind: ssp2.KindRequest}
	return c
}

// live reports whether the subscription has synced and is not
// bootstrapping: deltas apply to it and its cursor counts in an ack.
func (s *subState) live() bool {
	return s.synced && s.frame.Cursor >= 0 && s.frame.BootstrapState == nil
}

// applyDelta applies a delta section of subscription id ending at next:
// a live subscription behind it moves its cursor there. It reports
// whether it did (an older section is a duplicate, §8.2).
func (c *vclient) applyDelta(id string, next int64) bool {
	for _, s := range c.subs {
		if s.frame.ID == id && s.live() && next > s.frame.Cursor {
			s.frame.Cursor = next
			return true
		}
	}
	return false
}

// cursorFloor is the lowest cursor of the live subscriptions — what a
// client acks after a pull round (§8.2) — and false when none is live.
func (c *vclient) cursorFloor() (int64, bool) {
	floor, ok := int64(0), false
	for _, s := range c.subs {
		if s.live() && (!ok || s.frame.Cursor < floor) {
			floor, ok = s.frame.Cursor, true
		}
	}
	return floor, ok
}

// subscribe adds a subscription to a project of the tasks table; it
// starts with a bootstrap (cursor -1).
func (c *vclient) subscribe(id, project string) {
	scopes := map[string][]string{"project_id": {project}}
	c.subs = append(c.subs, &subState{
		frame:  ssp2.Subscription{ID: id, Table: tasks.Name, Scopes: scopes, Cursor: -1},
		scopes: string(ssp2.CanonicalScopes(scopes)),
	})
}

// request encodes the next request: an optional upsert of rowID in
// project, the pull header, and every subscription. The returned bytes
// stay valid until the next call.
func (c *vclient) request(rowID, project string, lim pullLimits) ([]byte, error) {
	c.frames = append(c.frames[:0], &c.hdr)
	if rowID != "" {
		c.seq++
		if err := c.upsert(rowID, project); err != nil {
			return nil, err
		}
		c.frames = append(c.frames, &c.push)
	}
	c.pull = ssp2.PullHeader{LimitCommits: lim.commits, LimitSnapshotRows: lim.snapshotRows, MaxSnapshotPages: lim.pages, Accept: lim.accept}
	c.frames = append(c.frames, &c.pull)
	for _, s := range c.subs {
		c.frames = append(c.frames, &s.frame)
	}
	c.msg.Frames = c.frames
	var err error
	if c.body, err = c.msg.AppendEncode(c.body[:0]); err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return c.body, nil
}

// upsert fills the push frame with one full-row upsert of rowID: title
// "load <rowID> @<seq>", done on even seqs, priority seq%5.
func (c *vclient) upsert(rowID, project string) error {
	c.text = append(append(append(c.text[:0], "load "...), rowID...), " @"...)
	c.text = strconv.AppendInt(c.text, c.seq, 10)
	c.vals[0] = ssp2.Value{Bytes: []byte(rowID)}
	c.vals[1] = ssp2.Value{Bytes: []byte(project)}
	c.vals[2] = ssp2.Value{Bytes: c.text}
	c.vals[3] = ssp2.Value{Bool: c.seq%2 == 0}
	c.vals[4] = ssp2.Value{Int: c.seq % 5}
	c.vals[5] = ssp2.Value{Int: 1_750_000_000_000 + c.seq}
	var err error
	if c.row, err = tasks.Codec.AppendRow(c.row[:0], c.vals); err != nil {
		return fmt.Errorf("encode row: %w", err)
	}
	c.push.ClientCommitID = c.id + "-c" + strconv.FormatInt(c.seq, 10)
	c.op[0] = ssp2.Operation{Table: tasks.Name, RowID: rowID, Op: ssp2.OpUpsert, Payload: c.row}
	return nil
}

// pushedID is the clientCommitId of the request just built, "" without a
// push.
func (c *vclient) pushedID() string {
	if len(c.frames) > 1 && c.frames[1] == ssp2.Frame(&c.push) {
		return c.push.ClientCommitID
	}
	return ""
}

// roundResult is what one response carried.
type roundResult struct {
	latency  time.Duration
	rows     int64 // inline segment rows, segment ref rowCounts, commit changes
	complete bool  // no section is still bootstrapping
	resets   int   // sections answered reset (cursor behind the horizon)
	cached   bool  // the push was answered from the idempotency cache
	refs     []ssp2.SegmentRef
	refSubs  []*subState
}

// errEpochChanged: the server reset its log in the middle of a run.
var errEpochChanged = errors.New("the server's log epoch changed during the run (was it reset by someone else?)")

// account reads one response and folds it into the client's state. It
// fails on anything a real client must refuse: a malformed response, an
// in-band ERROR, a schema floor or epoch reset, a push that is missing,
// misattributed or rejected, a section out of order or revoked, a cursor
// that goes backwards, and a pushed commit the pull does not cover.
func (c *vclient) account(body io.Reader, res *roundResult) error {
	mr, err := ssp2.NewMessageReader(body)
	if err != nil {
		return fmt.Errorf("read response: %w", err)
	}
	if mr.Kind() != ssp2.KindResponse || mr.WireVersion() != wireVersion {
		return fmt.Errorf("read response: got a wire version %d %s, want a version %d response", mr.WireVersion(), mr.Kind(), wireVersion)
	}
	pushID := c.pushedID()
	var (
		pushSeq     int64 = -1
		pushAnswers int
		subIdx      int
		cur         *subState
		reset       bool
		commits     int
	)
	res.complete = true
	for {
		f, err := mr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read response: %w", err)
		}
		switch f := f.(type) {
		case *ssp2.RespHeader:
			if f.RequiredSchemaVersion != nil {
				return fmt.Errorf("the server requires schema version %d; the load fixture is version %d", *f.RequiredSchemaVersion, fixtureSchema.Version)
			}
			if f.ResetRequired || f.LogEpoch != c.epoch {
				return errEpochChanged
			}
		case *ssp2.PushResult:
			pushAnswers++
			if f.ClientCommitID != pushID {
				return fmt.Errorf("PUSH_RESULT for %q, want %q", f.ClientCommitID, pushID)
			}
			switch f.Status {
			case ssp2.PushRejected:
				return fmt.Errorf("push %s rejected: %s", pushID, rejection(f))
			case ssp2.PushCached:
				res.cached = true
			}
			if f.CommitSeq != nil {
				pushSeq = *f.CommitSeq
			}
		case *ssp2.SubStart:
			if subIdx >= len(c.subs) || f.ID != c.subs[subIdx].frame.ID {
				return fmt.Errorf("SUB_START %q out of order", f.ID)
			}
			cur, reset, commits = c.subs[subIdx], false, 0
			switch f.Status {
			case ssp2.SubRevoked:
				return fmt.Errorf("subscription %s revoked (%s): the actor does not hold project %v", f.ID, f.ReasonCode, cur.frame.Scopes["project_id"])
			case ssp2.SubReset:
				reset = true
				res.resets++
			}
		case *ssp2.Commit:
			commits++
			res.rows += int64(len(f.Changes))
		case *ssp2.SegmentInline:
			n, err := segmentRows(f.Payload)
			if err != nil {
				return fmt.Errorf("inline segment: %w", err)
			}
			res.rows += n
		case *ssp2.SegmentRef:
			res.rows += f.RowCount
			res.refs = append(res.refs, *f)
			res.refSubs = append(res.refSubs, cur)
		case *ssp2.SubEnd:
			subIdx++
			if err := cur.end(f, reset, pushSeq, commits, c.pull.LimitCommits); err != nil {
				return err
			}
			if cur.frame.BootstrapState != nil {
				res.complete = false
			}
		case *ssp2.ErrorFrame:
			return fmt.Errorf("in-band ERROR %s: %s", f.Code, f.Message)
		}
		// LEASE, PUSH_RESULT_DETAILS and unknown frames carry nothing a
		// load client checks.
	}
	wantPush := 0
	if pushID != "" {
		wantPush = 1
	}
	if pushAnswers != wantPush || subIdx != len(c.subs) {
		return fmt.Errorf("response answered %d of %d pushes and %d of %d subscriptions", pushAnswers, wantPush, subIdx, len(c.subs))
	}
	return nil
}

// end applies a SUB_END: a reset section re-bootstraps next round; an
// incremental one moves its cursor, which never goes backwards, and —
// when this round pushed into it and the window was not cut by
// limitCommits — covers the pushed commit (push-to-visibility). A
// bootstrap's cursor is its snapshot pin, which may predate this round's
// push; the next incremental round catches up from there.
func (s *subState) end(f *ssp2.SubEnd, reset bool, pushSeq int64, commits int, limitCommits int32) error {
	if reset {
		s.frame.Cursor, s.frame.BootstrapState, s.synced = -1, nil, false
		return nil
	}
	incremental := s.live()
	if incremental && f.NextCursor < s.frame.Cursor {
		return fmt.Errorf("subscription %s: nextCursor %d is behind the cursor %d it pulled from", s.frame.ID, f.NextCursor, s.frame.Cursor)
	}
	full := limitCommits > 0 && commits >= int(limitCommits)
	if incremental && pushSeq >= 0 && !full && f.NextCursor < pushSeq {
		return fmt.Errorf("subscription %s: nextCursor %d does not cover the commit %d pushed in the same round", s.frame.ID, f.NextCursor, pushSeq)
	}
	s.frame.Cursor = f.NextCursor
	s.frame.BootstrapState = nil
	if f.BootstrapState != nil {
		// The frame aliases the reader's buffer.
		s.frame.BootstrapState = append([]byte(nil), f.BootstrapState...)
	}
	s.synced = true
	return nil
}

// segmentRows counts a rows segment's rows from its block headers (§5.2:
// "SSG2", formatVersion u16, flags u16, table str, schemaVersion i32, u16
// columns of {name str, type u8, flags u8}, then blocks of rowCount u32,
// byteLength u32 and the rows, ended by rowCount 0). The message reader
// has already validated the payload row by row, as a client must; decoding
// it a second time would make the tool, not the server, the cost of an
// inline bootstrap page.
func segmentRows(b []byte) (int64, error) {
	bad := errors.New("malformed rows segment")
	at := 8 // magic, formatVersion, flags
	str := func() bool {
		if len(b)-at < 4 {
			return false
		}
		n := int(binary.LittleEndian.Uint32(b[at:]))
		if n > len(b)-at-4 {
			return false
		}
		at += 4 + n
		return true
	}
	if !str() || len(b)-at < 6 {
		return 0, bad
	}
	at += 4 // schemaVersion
	cols := int(binary.LittleEndian.Uint16(b[at:]))
	at += 2
	for range cols {
		if !str() || len(b)-at < 2 {
			return 0, bad
		}
		at += 2
	}
	var rows int64
	for {
		if len(b)-at < 4 {
			return 0, bad
		}
		n := binary.LittleEndian.Uint32(b[at:])
		if n == 0 {
			return rows, nil
		}
		if len(b)-at < 8 {
			return 0, bad
		}
		size := int(binary.LittleEndian.Uint32(b[at+4:]))
		if size > len(b)-at-8 {
			return 0, bad
		}
		rows += int64(n)
		at += 8 + size
	}
}

// rejection renders a rejected push's first error record.
func rejection(f *ssp2.PushResult) string {
	for _, r := range f.Results {
		if r.Status != ssp2.OpApplied {
			return fmt.Sprintf("%s: %s", r.Code, r.Message)
		}
	}
	return "no error record"
}

// roundTripper carries one encoded request to the server and returns the
// response body; release frees it once the response is read.
type roundTripper interface {
	roundTrip(ctx context.Context, req []byte) (body io.Reader, release func(), err error)
}

// round sends one request over rt and accounts its response. rowID ""
// means no push.
func (c *vclient) round(ctx context.Context, rt roundTripper, rowID, project string, lim pullLimits) (roundResult, error) {
	var res roundResult
	req, err := c.request(rowID, project, lim)
	if err != nil {
		return res, err
	}
	start := time.Now()
	body, release, err := rt.roundTrip(ctx, req)
	if err != nil {
		return res, err
	}
	err = c.account(body, &res)
	release()
	res.latency = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("client %s: %w", c.id, err)
	}
	return res, nil
}
