package loadgen

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/syncnode/syncnode/ssp2"
)

func proxyTo(tb testing.TB, target string) http.Handler {
	tb.Helper()
	u, err := url.Parse(target)
	if err != nil {
		tb.Fatal(err)
	}
	return httputil.NewSingleHostReverseProxy(u)
}

func httptestServer(tb testing.TB, h http.Handler) string {
	s := httptest.NewServer(h)
	tb.Cleanup(s.Close)
	return s.URL
}

// testSegment writes a rows segment of the tasks table with n rows in
// blocks of at most block rows.
func testSegment(tb testing.TB, n, block int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	w, err := ssp2.NewSegmentWriter(&buf, ssp2.SegmentHeader{Table: "tasks", SchemaVersion: 1, Columns: tasks.Codec.Columns()})
	if err != nil {
		tb.Fatal(err)
	}
	c := newVClient("seg", "e")
	for i := range n {
		c.seq = int64(i)
		if err := c.upsert("row-"+strings.Repeat("x", i%7), "p"); err != nil {
			tb.Fatal(err)
		}
		if err := w.WriteRow(1, c.row); err != nil {
			tb.Fatal(err)
		}
		if (i+1)%block == 0 {
			if err := w.FlushBlock(); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func TestSegmentRows(t *testing.T) {
	for _, tc := range []struct{ n, block int }{{0, 1}, {1, 1}, {7, 3}, {2500, 1000}} {
		seg := testSegment(t, tc.n, tc.block)
		if got, err := segmentRows(seg); err != nil || got != int64(tc.n) {
			t.Errorf("%d rows in blocks of %d: segmentRows = %d, %v", tc.n, tc.block, got, err)
		}
		// Every truncation is refused, never miscounted.
		for cut := range len(seg) {
			if _, err := segmentRows(seg[:cut]); err == nil {
				t.Fatalf("%d rows: truncated at %d of %d: no error", tc.n, cut, len(seg))
			}
		}
	}
}

// FuzzSegmentRows: no input panics, and on a segment the codec accepts
// the block walk counts what the codec's reader counts.
func FuzzSegmentRows(f *testing.F) {
	f.Add(testSegment(f, 5, 2))
	f.Add(testSegment(f, 0, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := segmentRows(b)
		r, rerr := ssp2.NewSegmentReader(bytes.NewReader(b))
		if rerr != nil {
			return
		}
		var want int64
		for r.NextBlock() {
			want += int64(r.BlockRows())
		}
		if r.Err() == nil && (err != nil || n != want) {
			t.Fatalf("segmentRows = %d, %v; the reader counts %d", n, err, want)
		}
	})
}

// testResponse encodes a response with a few frames.
func testResponse(tb testing.TB) []byte {
	tb.Helper()
	var buf bytes.Buffer
	enc := ssp2.NewResponseEncoder(&buf, wireVersion)
	for _, f := range []ssp2.Frame{
		&ssp2.RespHeader{LogEpoch: "e1"},
		&ssp2.SubStart{ID: "s", Status: ssp2.SubActive, EffectiveScopes: map[string][]string{"project_id": {"p"}}},
		&ssp2.SegmentInline{Payload: testSegment(tb, 3, 2)},
		&ssp2.SubEnd{NextCursor: 7},
	} {
		if err := enc.WriteFrame(f); err != nil {
			tb.Fatal(err)
		}
	}
	if err := enc.End(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// TestMessageEnd feeds a response in chunks of every size: the end is
// found exactly when the last byte arrives, never before.
func TestMessageEnd(t *testing.T) {
	msg := testResponse(t)
	for size := 1; size <= len(msg); size++ {
		var got []byte
		scanned, end := 0, -1
		for off := 0; off < len(msg); off += size {
			got = append(got, msg[off:min(off+size, len(msg))]...)
			var err error
			if end, err = messageEnd(got, &scanned); err != nil {
				t.Fatal(err)
			}
			if end >= 0 && len(got) != len(msg) {
				t.Fatalf("chunks of %d: end %d found after %d of %d bytes", size, end, len(got), len(msg))
			}
		}
		if end != len(msg) {
			t.Fatalf("chunks of %d: end = %d, want %d", size, end, len(msg))
		}
	}
	// Bytes after END are visible to the caller, which refuses them.
	scanned := 0
	if end, err := messageEnd(append(msg, 0), &scanned); err != nil || end != len(msg) {
		t.Fatalf("with a trailing byte: end %d, %v", end, err)
	}
}

func FuzzMessageEnd(f *testing.F) {
	f.Add(testResponse(f))
	f.Fuzz(func(t *testing.T, b []byte) {
		scanned := 0
		end, err := messageEnd(b, &scanned)
		if err == nil && (end > len(b) || (end >= 0 && end < envelopeBytes+frameHeaderBytes)) {
			t.Fatalf("end %d of %d bytes", end, len(b))
		}
	})
}

// TestAccount folds a response into a client: rows counted, cursor moved,
// and the failures a real client must refuse are refused.
func TestAccount(t *testing.T) {
	c := newVClient("c1", "e1")
	c.subscribe("s", "p")
	if _, err := c.request("", "", pullOnly); err != nil {
		t.Fatal(err)
	}
	var res roundResult
	if err := c.account(bytes.NewReader(testResponse(t)), &res); err != nil {
		t.Fatal(err)
	}
	if res.rows != 3 || !res.complete || c.subs[0].frame.Cursor != 7 || !c.subs[0].synced {
		t.Fatalf("res %+v, sub %+v", res, c.subs[0])
	}
	// Another epoch is a reset this tool refuses.
	c.epoch = "e2"
	if err := c.account(bytes.NewReader(testResponse(t)), &res); err != errEpochChanged {
		t.Fatalf("epoch change: err = %v", err)
	}
	// A response for a pushed commit that carries no PUSH_RESULT fails.
	c.epoch = "e1"
	if _, err := c.request("row-1", "p", pushPullLimits); err != nil {
		t.Fatal(err)
	}
	if err := c.account(bytes.NewReader(testResponse(t)), &res); err == nil || !strings.Contains(err.Error(), "answered 0 of 1 pushes") {
		t.Fatalf("missing push result: err = %v", err)
	}
}

func TestReplaceReport(t *testing.T) {
	doc := []byte("# x\n\n" + ReportBegin + "\nold\n" + ReportEnd + "\ntail\n")
	got, err := ReplaceReport(doc, []byte("| new |\n"))
	if err != nil || string(got) != "# x\n\n"+ReportBegin+"\n| new |\n"+ReportEnd+"\ntail\n" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := ReplaceReport([]byte("no markers"), nil); err == nil {
		t.Fatal("no markers: no error")
	}
	// Prose that quotes the markers is not the section.
	prose := "between `" + ReportBegin + "` and `" + ReportEnd + "`;\n"
	doc = []byte(prose + ReportBegin + "\nold\n" + ReportEnd + "\n")
	got, err = ReplaceReport(doc, []byte("| new |"))
	if err != nil || string(got) != prose+ReportBegin+"\n| new |\n"+ReportEnd+"\n" {
		t.Fatalf("quoted markers: got %q, %v", got, err)
	}
}

func TestFormatting(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567", -4321: "-4,321"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
	var s series
	for i := 1; i <= 100; i++ {
		s.d = append(s.d, msDuration(float64(i)))
	}
	if got := s.summary("x"); got.Count != 100 || got.P50 != 50 || got.P95 != 95 || got.P99 != 99 || got.Max != 100 || got.Mean != 50.5 {
		t.Fatalf("summary = %+v", got)
	}
}

func msDuration(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// BenchmarkClientRound is the tool's own work per push+pull round, without
// the network: encode the request, account a response of one PUSH_RESULT
// and one commit.
func BenchmarkClientRound(b *testing.B) {
	c := newVClient("bench", "e1")
	c.subscribe("s", "p")
	c.subs[0].frame.Cursor, c.subs[0].synced = 5, true
	if _, err := c.request("p-r1", "p", pushPullLimits); err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	enc := ssp2.NewResponseEncoder(&buf, wireVersion)
	seq, rv := int64(6), int64(2)
	for _, f := range []ssp2.Frame{
		&ssp2.RespHeader{LogEpoch: "e1"},
		&ssp2.PushResult{ClientCommitID: c.push.ClientCommitID, Status: ssp2.PushApplied, CommitSeq: &seq, Results: []ssp2.OpResult{{Status: ssp2.OpApplied}}},
		&ssp2.SubStart{ID: "s", Status: ssp2.SubActive, EffectiveScopes: map[string][]string{"project_id": {"p"}}},
		&ssp2.Commit{CommitSeq: 6, CreatedAtMs: 1, ActorID: "a", Tables: []string{"tasks"}, Changes: []ssp2.Change{
			{RowID: "p-r1", Op: ssp2.OpUpsert, RowVersion: &rv, Scopes: map[string]string{"project_id": "p"}, Row: c.row}}},
		&ssp2.SubEnd{NextCursor: 6},
	} {
		if err := enc.WriteFrame(f); err != nil {
			b.Fatal(err)
		}
	}
	if err := enc.End(); err != nil {
		b.Fatal(err)
	}
	resp := buf.Bytes()
	var rd bytes.Reader
	b.ReportAllocs()
	for b.Loop() {
		c.seq = 0
		c.subs[0].frame.Cursor = 5
		if _, err := c.request("p-r1", "p", pushPullLimits); err != nil {
			b.Fatal(err)
		}
		rd.Reset(resp)
		var res roundResult
		if err := c.account(&rd, &res); err != nil {
			b.Fatal(err)
		}
	}
}
