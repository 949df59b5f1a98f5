package engine

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// openSQLiteNormal opens a SQLite store with synchronous=NORMAL: without
// an fsync per commit the round's CPU cost shows.
func openSQLiteNormal(t testing.TB) storage.Store {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db"), Synchronous: sqlitestore.SynchronousNormal})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// BenchmarkPushRound compares one push round updating the same row at
// wire version 2 (a full row) and 3 (the same row as a sparse row of
// every column, and a one-column patch), over SQLite: the cost of
// sparse-row decoding and column-version maintenance. Target: v3 within
// 1.1× of v2.
func BenchmarkPushRound(b *testing.B) {
	for _, bc := range []struct {
		name string
		wire uint16
		cols map[string]any // nil: every column
	}{
		{"v2-full", 2, nil},
		{"v3-full", 3, nil},
		{"v3-patch", 3, map[string]any{"id": "n1", "title": "patched"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := newV3(b, openSQLiteNormal, notesSchema, "notes", nil)
			seed(h)
			tb := h.table
			every := map[string]any{"id": "n1", "project_id": "p1", "title": "t", "body": "a body of some length", "n": 42, "doc": nil}
			var payload []byte
			switch {
			case bc.wire == 2:
				payload = full(b, tb, every)
			case bc.cols == nil:
				payload = sparse(b, tb, every)
			default:
				payload = sparse(b, tb, bc.cols)
			}
			ctx := context.Background()
			var out bytes.Buffer
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				body, err := (&ssp2.Message{WireVersion: bc.wire, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
					hdr("bench", h.ep), commit(fmt.Sprint(i), op(tb, "n1", payload)),
				}}).AppendEncode(nil)
				if err != nil {
					b.Fatal(err)
				}
				out.Reset()
				if err := h.e.Sync(ctx, alice, body, &out); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if n := h.e.Metrics().PushApplied.Load(); n < int64(b.N) {
				b.Fatalf("%d of %d pushes applied", n, b.N)
			}
		})
	}
}

// BenchmarkCascade1000 deletes a parent with 1,000 CASCADE children in one
// commit on SQLite: the children are found through the reference index
// and deleted, each with its change and tombstone. Target: ≤ 50 ms.
func BenchmarkCascade1000(b *testing.B) {
	h := newRefs(b, openSQLiteNormal, nil)
	docs, _ := h.schema.Table("docs")
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		parent := fmt.Sprint("F", i)
		ops := []ssp2.Operation{h.put("folders", map[string]any{"id": parent})}
		for j := range 1000 {
			ops = append(ops, op(docs, fmt.Sprintf("%s-D%d", parent, j), sparse(b, docs, map[string]any{
				"id": fmt.Sprintf("%s-D%d", parent, j), "project_id": "p1", "folder_id": parent, "title": "x"})))
		}
		for _, chunk := range [][]ssp2.Operation{ops[:1], ops[1:501], ops[501:]} {
			h.applied(3, alice, "seed", chunk...)
		}
		b.StartTimer()
		res, _ := h.push(3, alice, "c", h.del("folders", parent))
		if res.Status != ssp2.PushApplied {
			b.Fatalf("cascade = %+v", res)
		}
	}
}
