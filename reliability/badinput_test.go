package reliability

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/ssp2"
)

// badPartition is the partition every bad input is sent to.
const badPartition = "bad"

// target is a node under attack and what it held before each input.
type target struct {
	n      *node.Node
	tok    string
	client *http.Client
}

func newTarget(t testing.TB, n *node.Node) *target {
	tg := &target{n: n, tok: token(t, "alice", badPartition, "p1"), client: &http.Client{Transport: &http.Transport{}}}
	// One commit, so "unchanged" has something to compare.
	r, err := post(context.Background(), tg.client, n.URL(), tg.tok, baseRequests(t)[0], nil)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("seed commit: %v %d %s", err, r.status, r.body)
	}
	return tg
}

// state is what an input must not change unless the response says so.
type state struct {
	maxSeq int64
	rows   string // a digest of every row of p1
}

func (tg *target) state(t testing.TB) state {
	t.Helper()
	ctx := context.Background()
	seq, err := tg.n.Store.CommitMaxSeq(ctx, badPartition)
	if err != nil {
		t.Fatalf("read the log: %v", err)
	}
	r, err := post(ctx, tg.client, tg.n.URL(), tg.tok, encode(t, 1, &ssp2.ReqHeader{ClientID: "observer", SchemaVersion: 1},
		&ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
		&ssp2.Subscription{ID: "i", Table: "items", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: -1},
		&ssp2.Subscription{ID: "n", Table: "notes", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: -1}), nil)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("the node does not answer a plain pull: %v %d %s", err, r.status, r.body)
	}
	var digest strings.Builder
	for _, s := range frames[*ssp2.SegmentInline](r.msg) {
		digest.Write(s.Payload)
	}
	return state{maxSeq: seq, rows: digest.String()}
}

// send posts one input and checks the invariants: the node answers; never
// with a 5xx or an in-band internal error; a refusal is a typed SSP2
// error; and the log and rows change only as far as the response says
// commits were applied.
func (tg *target) send(t testing.TB, what string, body []byte, hdr map[string]string) response {
	t.Helper()
	before := tg.state(t)
	r, err := post(context.Background(), tg.client, tg.n.URL(), tg.tok, body, hdr)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	applied := int64(0)
	switch {
	case r.status >= 500:
		t.Fatalf("%s: %d %s", what, r.status, r.body)
	case r.status != http.StatusOK:
		var e struct{ Code, Category string }
		if json.Unmarshal(r.body, &e) != nil || e.Code == "" || e.Category == string(ssp2.CategoryInternal) {
			t.Fatalf("%s: %d with body %q, want a typed SSP2 error", what, r.status, r.body)
		}
	default:
		for _, f := range r.msg.Frames {
			switch f := f.(type) {
			case *ssp2.ErrorFrame:
				if f.Category == string(ssp2.CategoryInternal) {
					t.Fatalf("%s: in-band %s: %s", what, f.Code, f.Message)
				}
			case *ssp2.PushResult:
				if f.Status == ssp2.PushApplied {
					applied++
				}
				for _, o := range f.Results {
					if code := ssp2.Code(o.Code); o.Status == ssp2.OpError && code != ssp2.CodeIdempotencyCacheMiss {
						if info, ok := code.Info(); !ok || info.Category == ssp2.CategoryInternal || o.Retryable {
							t.Fatalf("%s: commit %s rejected with %s (retryable %v)", what, f.ClientCommitID, o.Code, o.Retryable)
						}
					}
				}
			}
		}
	}
	after := tg.state(t)
	if grew := after.maxSeq - before.maxSeq; grew < 0 || grew > applied {
		t.Fatalf("%s: the log grew by %d with %d commits applied", what, grew, applied)
	}
	if applied == 0 && after.rows != before.rows {
		t.Fatalf("%s: rows changed, and no commit was applied", what)
	}
	return r
}

// row encodes an items row; a nil body is NULL.
func itemRow(t testing.TB, id, project string, body *string, score float64) []byte {
	t.Helper()
	items, _ := mustSchema(t).Table("items")
	vals := []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte(project)}, {Null: body == nil}, {Int: 7}, {Float: score}, {Float: score}}
	if body != nil {
		vals[2].Bytes = []byte(*body)
	}
	b, err := items.Codec.AppendRow(nil, vals)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

// rawItemRow encodes an items row without checking its strings, the way
// a hostile client can: null bitmap, three str, an i64 and two f64.
func rawItemRow(id, project, body string, score float64) []byte {
	b := []byte{0}
	for _, v := range []string{id, project, body} {
		b = append(b, str(v)...)
	}
	b = binary.LittleEndian.AppendUint64(b, 7)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(score))
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(score))
}

// baseRequests are valid requests the classes below break: a push, a
// push with a pull, and a pull. Wire version 1, so they need no log epoch.
func baseRequests(t testing.TB) [][]byte {
	t.Helper()
	hdr := &ssp2.ReqHeader{ClientID: "attacker", SchemaVersion: 1}
	push := &ssp2.PushCommit{ClientCommitID: "base", Operations: []ssp2.Operation{
		{Table: "items", RowID: "base", Op: ssp2.OpUpsert, Payload: itemRow(t, "base", "p1", ptr("a body"), 1.5)},
	}}
	pull := []ssp2.Frame{&ssp2.PullHeader{LimitCommits: 100, Accept: 3},
		&ssp2.Subscription{ID: "s", Table: "items", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: 0, Params: json.RawMessage(`{"k":[1,2]}`)}}
	return [][]byte{
		encode(t, 1, hdr, push),
		encode(t, 1, append([]ssp2.Frame{hdr, &ssp2.PushCommit{ClientCommitID: "combined", Operations: []ssp2.Operation{
			{Table: "items", RowID: "base", Op: ssp2.OpDelete}}}}, pull...)...),
		encode(t, 1, append([]ssp2.Frame{hdr}, pull...)...),
	}
}

// frameBytes builds a raw frame.
func frameBytes(typ byte, payload []byte) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// str is an SSP2 str, without checking it.
func str(s string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(s)))
	return append(b, s...)
}

// rawRequest is a wire-v1 request of raw frames (header first, END last).
func rawRequest(frames ...[]byte) []byte {
	b := []byte("SSP2\x01\x00\x01\x00")
	for _, f := range frames {
		b = append(b, f...)
	}
	return append(b, 0, 0, 0, 0, 0)
}

func rawHeader(clientID string) []byte {
	return frameBytes(0x01, append(str(clientID), 1, 0, 0, 0))
}

// rawPush is a PUSH_COMMIT of one upsert with a raw payload.
func rawPush(ccid, table, rowID string, payload []byte) []byte {
	p := str(ccid)
	p = binary.LittleEndian.AppendUint32(p, 1)
	p = append(p, str(table)...)
	p = append(p, str(rowID)...)
	p = append(p, 1, 0, 1) // upsert, no baseVersion, a payload
	p = binary.LittleEndian.AppendUint32(p, uint32(len(payload)))
	return frameBytes(0x02, append(p, payload...))
}

// badInputs are the bad-input classes, as (name, body, headers).
type badInput struct {
	name string
	body []byte
	hdr  map[string]string
}

func badInputs(t testing.TB, rnd *rand.Rand, flips int) []badInput {
	t.Helper()
	var in []badInput
	add := func(name string, body []byte) { in = append(in, badInput{name: name, body: body}) }
	bases := baseRequests(t)

	// Truncations: every proper prefix of every base request.
	for bi, b := range bases {
		for n := range len(b) {
			add(fmt.Sprintf("base %d truncated to %d bytes", bi, n), b[:n])
		}
	}
	// Bit flips.
	for i := range flips {
		b := bytes.Clone(bases[i%len(bases)])
		pos := rnd.IntN(len(b))
		b[pos] ^= 1 << rnd.IntN(8)
		add(fmt.Sprintf("base %d with bit flipped at byte %d", i%len(bases), pos), b)
	}

	// U+0000 and invalid UTF-8, in every kind of string.
	for _, bad := range []string{"\x00", "\xff\xfe", "\xed\xa0\x80"} {
		q := fmt.Sprintf("%q", bad)
		row := rawItemRow("r", "p1", "ok", 1)
		add("clientId "+q, rawRequest(rawHeader("c"+bad), rawPush("k", "items", "r", row)))
		add("clientCommitId "+q, rawRequest(rawHeader("c"), rawPush("k"+bad, "items", "r", row)))
		add("table "+q, rawRequest(rawHeader("c"), rawPush("k-t", "items"+bad, "r", row)))
		add("rowId "+q, rawRequest(rawHeader("c"), rawPush("k-r", "items", "r"+bad, rawItemRow("r"+bad, "p1", "ok", 1))))
		add("string value "+q, rawRequest(rawHeader("c"), rawPush("k-v", "items", "r", rawItemRow("r", "p1", "o"+bad+"k", 1))))
		add("scope value "+q, rawRequest(rawHeader("c"), rawPush("k-s", "items", "r", rawItemRow("r", "p1"+bad, "ok", 1))))
		sub := str("s")
		sub = append(sub, str("items")...)
		sub = binary.LittleEndian.AppendUint32(sub, 1)
		sub = append(sub, str("project_id")...)
		sub = binary.LittleEndian.AppendUint32(sub, 1)
		sub = append(sub, str("p1"+bad)...)
		sub = append(sub, 0)                                    // no params
		sub = binary.LittleEndian.AppendUint64(sub, ^uint64(0)) // cursor -1
		sub = append(sub, 0)                                    // no token
		add("requested scope "+q, rawRequest(rawHeader("c"), frameBytes(0x03, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3}), frameBytes(0x04, sub)))
	}

	// Oversize: a body over the cap, a frame that claims 4 GiB, a count
	// that claims 4 billion operations.
	add("body over max_request_bytes", append(bytes.Clone(bases[0]), make([]byte, 33<<20)...))
	add("frame length 2^32-1", append([]byte("SSP2\x01\x00\x01\x00"), 0x01, 0xff, 0xff, 0xff, 0xff))
	huge := str("k")
	huge = binary.LittleEndian.AppendUint32(huge, math.MaxUint32)
	add("operation count 2^32-1", rawRequest(rawHeader("c"), frameBytes(0x02, huge)))

	// Unknown frames: skipped between the header and END, an error
	// elsewhere; a response frame in a request is no unknown frame.
	add("reserved frame 0x17 inside", rawRequest(rawHeader("c"), frameBytes(0x17, []byte("??")), rawPush("k-u", "items", "u", itemRow(t, "u", "p1", nil, 2))))
	add("unknown frame first", append([]byte("SSP2\x01\x00\x01\x00"), append(frameBytes(0x2f, nil), rawHeader("c")...)...))
	add("frame after END", append(bytes.Clone(bases[2]), frameBytes(0x17, nil)...))
	add("response frame in a request", rawRequest(rawHeader("c"), frameBytes(0x12, nil)))

	// Huge numbers: i64 past ±(2^53−1), i32 extremes, non-finite floats.
	cursor := func(c uint64) []byte {
		sub := append(str("s"), str("items")...)
		sub = binary.LittleEndian.AppendUint32(sub, 1)
		sub = append(sub, str("project_id")...)
		sub = binary.LittleEndian.AppendUint32(sub, 1)
		sub = append(sub, str("p1")...)
		sub = append(sub, 0)
		sub = binary.LittleEndian.AppendUint64(sub, c)
		return frameBytes(0x04, append(sub, 0))
	}
	pullHdr := frameBytes(0x03, []byte{0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0x80, 3})
	add("cursor 2^53", rawRequest(rawHeader("c"), pullHdr, cursor(1<<53)))
	add("cursor 2^53-1", rawRequest(rawHeader("c"), pullHdr, cursor(1<<53-1)))
	add("cursor -2^63", rawRequest(rawHeader("c"), pullHdr, cursor(1<<63)))
	add("schemaVersion 2^31-1", rawRequest(frameBytes(0x01, append(str("c"), 0xff, 0xff, 0xff, 0x7f)), pullHdr, cursor(0)))
	for i, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), math.SmallestNonzeroFloat64, math.MaxFloat64} {
		add(fmt.Sprintf("float %v", f), rawRequest(rawHeader("c"), rawPush(fmt.Sprint("k-f", i), "items", fmt.Sprint("f", i), itemRow(t, fmt.Sprint("f", i), "p1", nil, f))))
	}
	return in
}

// outcome is what a response says, structurally: enough to tell two
// stores apart when they treat one input differently.
func outcome(r response) string {
	if r.status != http.StatusOK {
		var e struct{ Code string }
		_ = json.Unmarshal(r.body, &e)
		return fmt.Sprintf("%d %s", r.status, e.Code)
	}
	var b strings.Builder
	for _, f := range r.msg.Frames {
		switch f := f.(type) {
		case *ssp2.RespHeader:
			fmt.Fprintf(&b, "header(required=%v) ", f.RequiredSchemaVersion != nil)
		case *ssp2.PushResult:
			fmt.Fprintf(&b, "push(%s", f.Status)
			for _, o := range f.Results {
				fmt.Fprintf(&b, " %s:%s", o.Status, o.Code)
			}
			b.WriteString(") ")
		case *ssp2.SubStart:
			fmt.Fprintf(&b, "sub(%s %s bootstrap=%v) ", f.Status, f.ReasonCode, f.Bootstrap)
		case *ssp2.ErrorFrame:
			fmt.Fprintf(&b, "error(%s) ", f.Code)
		}
	}
	return b.String()
}

// TestBadInputs sends every bad-input class to a node on each store (see
// target.send for what each must satisfy), and both stores must answer
// every input alike. SYNCNODE_LONG flips many more bits.
func TestBadInputs(t *testing.T) {
	rnd := newRand(t)
	seed := rnd.Uint64()
	answers := map[string][]string{} // input → outcome per store, in order
	var names []string
	onBothStores(t, func(t *testing.T, st store) {
		tg := newTarget(t, startNode(t, st, nil))
		inputs := badInputs(t, rand.New(rand.NewPCG(seed, seed)), pick(200, 20000))
		for i, in := range inputs {
			key := fmt.Sprintf("%05d %s", i, in.name)
			if st.name == "sqlite" {
				names = append(names, key)
			}
			answers[key] = append(answers[key], st.name+": "+outcome(tg.send(t, in.name, in.body, in.hdr)))
		}

		// Gzip: not gzip, truncated gzip, and bombs, several at once:
		// each refused, and the in-flight budget given back.
		var bomb bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
		_, _ = zw.Write(make([]byte, 64<<20))
		_ = zw.Close()
		gz := map[string]string{"Content-Encoding": "gzip"}
		tg.send(t, "not gzip", baseRequests(t)[0], gz)
		tg.send(t, "truncated gzip", bomb.Bytes()[:bomb.Len()/2], gz)
		before := tg.state(t)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				r, err := post(context.Background(), tg.client, tg.n.URL(), tg.tok, bomb.Bytes(), gz)
				if err != nil || r.status != http.StatusRequestEntityTooLarge && r.status != http.StatusServiceUnavailable {
					t.Errorf("gzip bomb: %v %d %s", err, r.status, r.body)
				}
			})
		}
		wg.Wait()
		if after := tg.state(t); after != before {
			t.Fatal("gzip bombs changed the partition")
		}
	})
	for _, k := range names {
		if a := answers[k]; len(a) == 2 && strings.TrimPrefix(a[0], "sqlite: ") != strings.TrimPrefix(a[1], "postgres: ") {
			t.Errorf("%s: the stores differ:\n\t%s\n\t%s", k, a[0], a[1])
		}
	}
}

// fuzzTarget is the node FuzzSyncRequest attacks: one per fuzzing
// process, on SQLite (or on PostgreSQL with SYNCNODE_FUZZ_POSTGRES=1 and
// SYNCNODE_TEST_POSTGRES_URL), stopped by TestMain.
var fuzzTarget struct {
	once sync.Once
	tg   *target
	stop func()
	err  error
}

func fuzzNode(t testing.TB) *target {
	fuzzTarget.once.Do(func() {
		dir, err := os.MkdirTemp("", "syncnode-fuzz-")
		if err != nil {
			fuzzTarget.err = err
			return
		}
		st := store{dataDir: dir}
		if os.Getenv("SYNCNODE_FUZZ_POSTGRES") != "" {
			st.pgURL, st.pgSchema = os.Getenv("SYNCNODE_TEST_POSTGRES_URL"), fmt.Sprintf("syncnode_fuzz_%d", os.Getpid())
		}
		cfg, err := nodeConfig(st)
		if err != nil {
			fuzzTarget.err = err
			return
		}
		n, err := runNode(context.Background(), cfg)
		if err != nil {
			fuzzTarget.err = err
			return
		}
		fuzzTarget.tg = newTarget(t, n)
		fuzzTarget.stop = func() {
			_ = n.Stop(context.Background())
			_ = os.RemoveAll(dir)
		}
	})
	if fuzzTarget.err != nil {
		t.Fatal(fuzzTarget.err)
	}
	return fuzzTarget.tg
}

// FuzzSyncRequest posts fuzzed bodies to a real node, with the invariants
// of TestBadInputs: it stays up, never answers with an internal error,
// and changes nothing a response does not acknowledge. Seeded with the
// base requests, the bad-input classes and the golden request vectors.
func FuzzSyncRequest(f *testing.F) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, b := range baseRequests(f) {
		f.Add(b)
	}
	for i, in := range badInputs(f, rnd, 20) {
		// Every truncation would make the fuzzer's baseline slow: one in
		// sixteen seeds enough of them.
		if len(in.body) < 1<<20 && (!strings.Contains(in.name, "truncated") || i%16 == 0) {
			f.Add(in.body)
		}
	}
	if bins, _ := filepath.Glob(filepath.Join("..", "..", "shared", "ssp2-vectors", "request", "*.bin")); len(bins) > 0 {
		for _, p := range bins {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzNode(t).send(t, "fuzzed body", body, nil)
	})
}
