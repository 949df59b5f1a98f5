package engine

import (
	"context"
	"testing"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/segments"
	"github.com/syncnode/syncnode/ssp2"
)

// TestBootstrapFallsBackInline: when the segment store fails (here its
// Object Store bucket is gone; right after a cluster member died it is
// a stream without a leader), a bootstrap the client takes inline is
// still served, every page built in memory and sent inline, and counted;
// a client that takes only referenced segments gets the retryable
// sync.internal_error.
func TestBootstrapFallsBackInline(t *testing.T) {
	st := openSQLite(t)
	srv := embeddedtest.Start(t)
	js := srv.JetStream()
	var segs *segments.Store
	h := newHarnessOn(t, st, imageSchema, func(c *Config) {
		var err error
		if segs, err = segments.New(segments.Config{JetStream: js, Store: st, Clock: c.Clock, MaintenanceInterval: -1}); err != nil {
			t.Fatal(err)
		}
		if err := segs.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = segs.Stop(context.Background()) })
		c.Segments, c.MaxOperations = segs, new(5000)
	})
	ih := &imageHarness{harness: h}
	who := id("alice", "p1")
	epoch := h.epoch(who)
	ih.seed(who, epoch, "tasks", "p1", 2500)
	if err := js.DeleteStream(context.Background(), bus.ObjectStream(segs.Bucket())); err != nil {
		t.Fatal(err)
	}

	frames := ih.pull(who, epoch, "tasks", "p1", ssp2.AcceptInlineRows|ssp2.AcceptExternalRows, 10, nil)
	pages := 0
	for _, f := range frames {
		switch f := f.(type) {
		case *ssp2.SegmentInline:
			pages++
		case *ssp2.SubEnd:
		default:
			t.Fatalf("frame %T %+v in a bootstrap over a failed segment store, want inline pages", f, f)
		}
	}
	if pages != 3 || h.e.Metrics().SegmentFallbacks.Load() != 3 {
		t.Fatalf("%d inline pages, %d fallbacks; want 3 and 3 (2,500 rows, 1,000 a page)", pages, h.e.Metrics().SegmentFallbacks.Load())
	}

	m := h.sync(who, 2, &ssp2.ReqHeader{ClientID: "ref-only", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PullHeader{Accept: ssp2.AcceptExternalRows, LimitSnapshotRows: 1000},
		&ssp2.Subscription{ID: "s", Table: "tasks", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: -1})
	var ef *ssp2.ErrorFrame
	for _, f := range m.Frames {
		if e, ok := f.(*ssp2.ErrorFrame); ok {
			ef = e
		}
	}
	if ef == nil || ef.Code != string(ssp2.CodeInternalError) || !ef.Retryable {
		t.Fatalf("a referenced-only bootstrap over a failed segment store: %v, want the retryable sync.internal_error", m.Frames)
	}
}
