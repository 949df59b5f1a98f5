package engine

import (
	"context"
	"fmt"
	"io"
	"iter"
	"net/url"
	"testing"
	"time"

	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/segments"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/sqliteimage"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// imageSchema has an ordinary table and one with a client-side encrypted
// column, which the image lane must never serve (SPEC.md §5.11).
const imageSchema = `{"version":1,"tables":[
	{"name":"tasks","columns":[
		{"name":"id","type":"string"},
		{"name":"project_id","type":"string"},
		{"name":"title","type":"string","nullable":true},
		{"name":"n","type":"integer","nullable":true}],
	 "primaryKey":"id","scopes":["project:{project_id}"]},
	{"name":"secrets","columns":[
		{"name":"id","type":"string"},
		{"name":"project_id","type":"string"},
		{"name":"body","type":"bytes","encrypted":true,"declaredType":"string"}],
	 "primaryKey":"id","scopes":["project:{project_id}"]}]}`

type imageHarness struct {
	*harness
	segs   *segments.Store
	signer *signedurl.Signer
	clock  *clock.Manual
	seeds  int
}

// newImageHarness is an engine with the image lane and signed URLs on,
// its segments in a real segment store on an embedded NATS server.
func newImageHarness(t *testing.T) *imageHarness {
	t.Helper()
	st := openSQLite(t)
	js := embeddedtest.Start(t).JetStream()
	ih := &imageHarness{}
	var err error
	if ih.signer, err = signedurl.New(signedurl.Config{Key: []byte("engine-image-test-key-0123456789ab"), TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ih.harness = newHarnessOn(t, st, imageSchema, func(c *Config) {
		ih.clock = c.Clock.(*clock.Manual)
		if ih.segs, err = segments.New(segments.Config{JetStream: js, Store: st, Clock: c.Clock, MaintenanceInterval: -1}); err != nil {
			t.Fatal(err)
		}
		if err := ih.segs.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ih.segs.Stop(context.Background()) })
		c.Segments, c.SignedURLs, c.MaxOperations = ih.segs, ih.signer, new(5000)
		c.SignedURLBase = "https://cdn.example/sync/"
		dir := t.TempDir()
		c.ImageWriter = func(ctx context.Context, w io.Writer, l sqliteimage.Layout, m sqliteimage.Meta, rows iter.Seq2[sqliteimage.Row, error]) (int64, error) {
			return sqlitestore.WriteImage(ctx, w, dir, l, m, rows)
		}
	})
	return ih
}

// seed pushes n rows of table into project in one commit and returns
// the partition's max seq after it.
func (h *imageHarness) seed(who Identity, epoch, table, project string, n int) int64 {
	h.t.Helper()
	h.seeds++
	t, _ := h.schema.Table(table)
	ops := make([]ssp2.Operation, n)
	for i := range ops {
		rowID := fmt.Sprintf("%s-%s-%05d", table, project, i)
		vals := []ssp2.Value{{Bytes: []byte(rowID)}, {Bytes: []byte(project)}, {Bytes: []byte("v")}}
		if table == "tasks" {
			vals = append(vals, ssp2.Value{Int: int64(i)})
		}
		payload, err := t.Codec.AppendRow(nil, vals)
		if err != nil {
			h.t.Fatal(err)
		}
		ops[i] = ssp2.Operation{Table: table, RowID: rowID, Op: ssp2.OpUpsert, Payload: payload}
	}
	m := h.sync(who, 2, &ssp2.ReqHeader{ClientID: "seeder", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PushCommit{ClientCommitID: fmt.Sprintf("seed-%d", h.seeds), Operations: ops})
	r := m.Frames[1].(*ssp2.PushResult)
	if r.Status != ssp2.PushApplied || r.CommitSeq == nil {
		h.t.Fatalf("seed: %+v", r)
	}
	return *r.CommitSeq
}

// pull bootstraps one subscription and returns its frames after
// SUB_START, up to and including SUB_END.
func (h *imageHarness) pull(who Identity, epoch, table, project string, accept uint8, pages int32, token []byte) []ssp2.Frame {
	h.t.Helper()
	m := h.sync(who, 2, &ssp2.ReqHeader{ClientID: "puller", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PullHeader{Accept: accept, LimitSnapshotRows: 1000, MaxSnapshotPages: pages},
		&ssp2.Subscription{ID: "s", Table: table, Scopes: map[string][]string{"project_id": {project}}, Cursor: -1, BootstrapState: token})
	for i, f := range m.Frames {
		if _, ok := f.(*ssp2.SubStart); ok {
			return m.Frames[i+1:]
		}
	}
	h.t.Fatalf("no section in %v", m.Frames)
	return nil
}

const acceptAll = ssp2.AcceptInlineRows | ssp2.AcceptExternalRows | ssp2.AcceptSQLite

// TestImageLane: a bootstrap of a table larger than one page, for a
// client accepting images, is exactly one sqlite SEGMENT_REF without
// cursors whose image holds the whole table at the pin, with the
// descriptor's fields in its metadata row; it is built once per key and
// reused. The rows lane serves a client without bit 2, a table that fits
// one page, a resumed bootstrap, and any table with an encrypted column.
func TestImageLane(t *testing.T) {
	h := newImageHarness(t)
	who := id("alice", "p1", "p2")
	epoch := h.epoch(who)
	// The image pins at its scope pin (SPEC.md §4.7): the last commit to
	// tasks in p1, not the partition's head.
	head := h.seed(who, epoch, "tasks", "p1", 2500)
	if later := max(h.seed(who, epoch, "tasks", "p2", 400), h.seed(who, epoch, "secrets", "p1", 2500)); later <= head {
		t.Fatalf("seeds at %d, then %d", head, later)
	}

	frames := h.pull(who, epoch, "tasks", "p1", acceptAll, 0, nil)
	if len(frames) != 2 {
		t.Fatalf("image section: %v", frames)
	}
	ref, ok := frames[0].(*ssp2.SegmentRef)
	if !ok || ref.MediaType != ssp2.MediaSQLite || ref.RowCursor != nil || ref.NextRowCursor != nil || ref.URL != nil ||
		ref.RowCount != 2500 || ref.AsOfCommitSeq != head || ref.Table != "tasks" {
		t.Fatalf("image descriptor: %+v", frames[0])
	}
	digest := ssp2.ScopeDigest(map[string][]string{"project_id": {"p1"}})
	if ref.ScopeDigest != digest {
		t.Fatalf("scope digest %s, want %s", ref.ScopeDigest, digest)
	}
	if end := frames[1].(*ssp2.SubEnd); end.NextCursor != head || end.BootstrapState != nil {
		t.Fatalf("SUB_END after an image: %+v", end)
	}
	data, err := h.segs.Bytes(context.Background(), ref.SegmentID)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != ref.ByteLength {
		t.Fatalf("%d bytes, descriptor says %d", len(data), ref.ByteLength)
	}
	tbl, _ := h.schema.Table("tasks")
	l := sqliteimage.Layout{Table: "tasks", Columns: tbl.WireColumns(), PK: tbl.PKIndex}
	im, err := sqliteimage.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.Check(l, sqliteimage.Meta{Format: 1, Table: "tasks", SchemaVersion: 1, AsOfCommitSeq: head, ScopeDigest: digest, RowCount: 2500}); err != nil {
		t.Fatal(err)
	}
	if n, err := im.Rows(l, func(v int64, vals []ssp2.Value) error {
		if v < 1 || string(vals[1].Bytes) != "p1" {
			return fmt.Errorf("row %s: version %d, project %s", vals[0].Bytes, v, vals[1].Bytes)
		}
		return nil
	}); err != nil || n != 2500 {
		t.Fatalf("image rows: %d, %v", n, err)
	}

	// Reused: the same key serves the stored image, built once.
	if again := h.pull(who, epoch, "tasks", "p1", acceptAll, 0, nil); again[0].(*ssp2.SegmentRef).SegmentID != ref.SegmentID {
		t.Fatal("the second pull got another image")
	}
	if m := h.e.Metrics(); m.ImagesBuilt.Load() != 1 || m.ImagesReused.Load() != 1 || m.ImageRefs.Load() != 2 {
		t.Fatalf("images built %d, reused %d, refs %d", m.ImagesBuilt.Load(), m.ImagesReused.Load(), m.ImageRefs.Load())
	}

	rowsLane := func(what string, frames []ssp2.Frame) {
		t.Helper()
		for _, f := range frames {
			if r, ok := f.(*ssp2.SegmentRef); ok && r.MediaType != ssp2.MediaRows {
				t.Fatalf("%s: a %s segment", what, r.MediaType)
			}
		}
	}
	rowsLane("without accept bit 2", h.pull(who, epoch, "tasks", "p1", ssp2.AcceptInlineRows|ssp2.AcceptExternalRows, 0, nil))
	rowsLane("a table of one page", h.pull(who, epoch, "tasks", "p2", acceptAll, 0, nil))
	rowsLane("an encrypted table", h.pull(who, epoch, "secrets", "p1", acceptAll, 0, nil))

	// A bootstrap resumed mid-table continues on the rows lane.
	first := h.pull(who, epoch, "tasks", "p1", ssp2.AcceptInlineRows|ssp2.AcceptExternalRows, 1, nil)
	token := first[len(first)-1].(*ssp2.SubEnd).BootstrapState
	if token == nil {
		t.Fatal("no resume token after one page")
	}
	resumed := h.pull(who, epoch, "tasks", "p1", acceptAll, 0, token)
	rowsLane("a resumed bootstrap", resumed)
	if r, ok := resumed[0].(*ssp2.SegmentRef); ok && r.RowCursor == nil {
		t.Fatal("the resumed page has no row cursor")
	}
}

// TestImageScopePin: an image is pinned at its scope pin (SPEC.md §4.7),
// so a commit outside the subscription's scopes — another project, or
// another table under the same project — reuses the stored image and
// its pin, and the incremental pull from that pin is empty; a commit in
// the scope moves the pin and builds a new image. A client without
// accept bit 2 still pins at the partition's head.
func TestImageScopePin(t *testing.T) {
	h := newImageHarness(t)
	who := id("alice", "p1", "p2")
	epoch := h.epoch(who)
	pin := h.seed(who, epoch, "tasks", "p1", 1500)
	ref := h.pull(who, epoch, "tasks", "p1", acceptAll, 0, nil)[0].(*ssp2.SegmentRef)
	if ref.MediaType != ssp2.MediaSQLite || ref.AsOfCommitSeq != pin {
		t.Fatalf("first image: %+v, want a sqlite segment pinned at %d", ref, pin)
	}

	head := max(h.seed(who, epoch, "tasks", "p2", 10), h.seed(who, epoch, "secrets", "p1", 10))
	frames := h.pull(who, epoch, "tasks", "p1", acceptAll, 0, nil)
	again := frames[0].(*ssp2.SegmentRef)
	if again.SegmentID != ref.SegmentID || again.AsOfCommitSeq != pin {
		t.Fatalf("after commits elsewhere (head %d): image %s at %d, want %s at %d", head, again.SegmentID, again.AsOfCommitSeq, ref.SegmentID, pin)
	}
	if end := frames[len(frames)-1].(*ssp2.SubEnd); end.NextCursor != pin {
		t.Fatalf("SUB_END cursor %d, want the pin %d", end.NextCursor, pin)
	}
	if m := h.e.Metrics(); m.ImagesBuilt.Load() != 1 || m.ImagesReused.Load() != 1 {
		t.Fatalf("images built %d, reused %d; want 1, 1", m.ImagesBuilt.Load(), m.ImagesReused.Load())
	}
	m := h.sync(who, 2, &ssp2.ReqHeader{ClientID: "puller", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PullHeader{Accept: acceptAll},
		&ssp2.Subscription{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: pin})
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *ssp2.Commit:
			t.Fatalf("the window after the scope pin holds commit %d", f.CommitSeq)
		case *ssp2.SubEnd:
			if f.NextCursor != head {
				t.Fatalf("incremental cursor %d, want the head %d", f.NextCursor, head)
			}
		}
	}

	if r := h.pull(who, epoch, "tasks", "p1", ssp2.AcceptInlineRows|ssp2.AcceptExternalRows, 1, nil); r[len(r)-1].(*ssp2.SubEnd).NextCursor != head {
		t.Fatalf("rows lane without bit 2 pinned at %d, want the head %d", r[len(r)-1].(*ssp2.SubEnd).NextCursor, head)
	}

	moved := h.seed(who, epoch, "tasks", "p1", 1)
	next := h.pull(who, epoch, "tasks", "p1", acceptAll, 0, nil)[0].(*ssp2.SegmentRef)
	if next.SegmentID == ref.SegmentID || next.AsOfCommitSeq != moved {
		t.Fatalf("after a commit in the scope: image at %d (same bytes %v), want a new one at %d", next.AsOfCommitSeq, next.SegmentID == ref.SegmentID, moved)
	}
	if m := h.e.Metrics(); m.ImagesBuilt.Load() != 2 {
		t.Fatalf("images built %d, want 2", m.ImagesBuilt.Load())
	}
}

// TestSignedSegmentURLs: with accept bit 3 every SEGMENT_REF carries a
// url under SignedURLBase and its expiry; AuthorizeSignedSegment accepts
// the token until the TTL plus skew has passed and refuses a tampered
// token, another segment, another partition's audience and a digest the
// partition never published with the spec's codes.
func TestSignedSegmentURLs(t *testing.T) {
	h := newImageHarness(t)
	who := id("alice", "p1")
	epoch := h.epoch(who)
	h.seed(who, epoch, "tasks", "p1", 1500)
	frames := h.pull(who, epoch, "tasks", "p1", acceptAll|ssp2.AcceptSignedURLs, 0, nil)
	ref := frames[0].(*ssp2.SegmentRef)
	if ref.URL == nil || ref.URLExpiresAtMs == nil || *ref.URLExpiresAtMs != h.clock.Now().Add(time.Minute).UnixMilli() {
		t.Fatalf("descriptor url %v, expiry %v", ref.URL, ref.URLExpiresAtMs)
	}
	u, err := url.Parse(*ref.URL)
	if err != nil || u.Scheme != "https" || u.Host != "cdn.example" || u.Path != "/sync/segments/"+ref.SegmentID {
		t.Fatalf("url %s", *ref.URL)
	}
	tok := u.Query().Get("st")
	ctx := context.Background()
	if pub, err := h.e.AuthorizeSignedSegment(ctx, ref.SegmentID, tok); err != nil || pub.SegmentID != ref.SegmentID {
		t.Fatalf("authorize: %v", err)
	}
	refuse := func(what, segID, token string, want ssp2.Code) {
		t.Helper()
		if _, err := h.e.AuthorizeSignedSegment(ctx, segID, token); ssp2.CodeOf(err) != want {
			t.Errorf("%s: %v, want %s", what, err, want)
		}
	}
	refuse("tampered", ref.SegmentID, tok[:len(tok)-2]+"AA", ssp2.CodeForbidden)
	refuse("another segment", "sha256:"+fmt.Sprintf("%064d", 1), tok, ssp2.CodeForbidden)
	digest := ssp2.ScopeDigest(map[string][]string{"project_id": {"p1"}})
	other, _ := h.signer.Sign(signedurl.Segment, "q", ref.SegmentID, digest, h.clock.Now())
	refuse("another partition", ref.SegmentID, other, ssp2.CodeNotFound)
	foreign, _ := h.signer.Sign(signedurl.Segment, "p", ref.SegmentID, "x", h.clock.Now())
	refuse("another digest", ref.SegmentID, foreign, ssp2.CodeForbidden)
	h.clock.Advance(time.Minute + signedurl.Skew)
	if _, err := h.e.AuthorizeSignedSegment(ctx, ref.SegmentID, tok); err != nil {
		t.Fatalf("at the skew's edge: %v", err)
	}
	h.clock.Advance(time.Second)
	refuse("expired", ref.SegmentID, tok, ssp2.CodeSegmentExpired)
	if h.e.Metrics().SignedRefusals.Load() != 5 || h.e.Metrics().SignedURLs.Load() != 1 {
		t.Fatalf("signed urls %d, refusals %d", h.e.Metrics().SignedURLs.Load(), h.e.Metrics().SignedRefusals.Load())
	}

	// Without bit 3, no url.
	if r := h.pull(who, epoch, "tasks", "p1", acceptAll, 0, nil)[0].(*ssp2.SegmentRef); r.URL != nil {
		t.Fatal("a url without accept bit 3")
	}
}
