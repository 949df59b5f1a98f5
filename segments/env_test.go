package segments

import (
	"context"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// names is the bus namespace of prefix.
func names(t testing.TB, prefix string) bus.Names {
	t.Helper()
	n, err := bus.NewNames(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// backend opens a fresh, empty SQL store owned by tb.
type backend struct {
	name string
	open func(tb testing.TB) storage.Store
}

func backends() []backend {
	return []backend{{"sqlite", openSQLite}, {"postgres", openPostgres}}
}

// eachBackend runs fn once per SQL store.
func eachBackend(t *testing.T, fn func(t *testing.T, open func(tb testing.TB) storage.Store)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.open)
		})
	}
}

func openSQLite(tb testing.TB) storage.Store {
	tb.Helper()
	st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{
		Path: filepath.Join(tb.TempDir(), "sync.db"), Synchronous: sqlitestore.SynchronousNormal,
	})
	if err != nil {
		tb.Fatalf("open SQLite: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// openPostgres opens a store in a fresh schema, dropped at cleanup; the
// PostgreSQL half skips without SYNCNODE_TEST_POSTGRES_URL, except under
// CI, where it fails.
func openPostgres(tb testing.TB) storage.Store {
	tb.Helper()
	url, schema := pgtest.Schema(tb)
	st, err := pgstore.Open(context.Background(), pgstore.Config{URL: url, Schema: schema, MaxConns: 8})
	if err != nil {
		tb.Fatalf("open PostgreSQL: %v", err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// env is a real embedded NATS server, a real SQL store and an injected
// clock; node opens segment stores on them (one per simulated node).
type env struct {
	t     testing.TB
	ctx   context.Context
	srv   *embedded.Server
	js    jetstream.JetStream
	index storage.Store
	clock *clock.Manual
	// t0 is the clock's start: the wall clock when the env was made, so
	// that the server's message times compare with it as GC needs.
	t0 int64
}

func newEnv(t testing.TB, open func(tb testing.TB) storage.Store) *env {
	t.Helper()
	e := &env{t: t, ctx: testCtx(t), index: open(t)}
	e.t0 = time.Now().UnixMilli()
	e.clock = clock.NewManual(time.UnixMilli(e.t0))
	e.srv = embeddedtest.Start(t)
	e.js = e.srv.JetStream()
	return e
}

// node starts a segment store; cfg's zero fields get test defaults
// (injected clock, no background maintenance).
func (e *env) node(cfg Config) *Store {
	e.t.Helper()
	if cfg.JetStream == nil {
		cfg.JetStream = e.js
	}
	if cfg.Store == nil {
		cfg.Store = e.index
	}
	if cfg.Clock == nil {
		cfg.Clock = e.clock
	}
	if cfg.MaintenanceInterval == 0 {
		cfg.MaintenanceInterval = -1
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(e.t)
	}
	if cfg.TempDir == "" {
		cfg.TempDir = e.t.TempDir()
	}
	s, err := New(cfg)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	if err := s.Start(e.ctx); err != nil {
		e.t.Fatalf("Start: %v", err)
	}
	e.t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			e.t.Errorf("Stop: %v", err)
		}
	})
	return s
}

// advance moves the clock.
func (e *env) advance(d time.Duration) int64 { return e.clock.Advance(d).UnixMilli() }

// nowMs is the clock in Unix milliseconds.
func (e *env) nowMs() int64 { return e.clock.Now().UnixMilli() }

// chunkSubjects counts the bucket's chunk subjects and their messages
// (stream info with a subject filter).
func (e *env) chunkSubjects(s *Store) (subjects int, msgs uint64) {
	e.t.Helper()
	info, err := s.stream.Info(e.ctx, jetstream.WithSubjectFilter("$O."+s.Bucket()+".C.>"))
	if err != nil {
		e.t.Fatalf("stream info: %v", err)
	}
	for _, n := range info.State.Subjects {
		msgs += n
	}
	return len(info.State.Subjects), msgs
}

// testColumns is the column table of the test rows segments.
var testColumns = []ssp2.Column{
	{Name: "id", Type: ssp2.TypeString},
	{Name: "n", Type: ssp2.TypeInteger},
	{Name: "body", Type: ssp2.TypeString, Nullable: true},
}

var testHeader = ssp2.SegmentHeader{Table: "tasks", SchemaVersion: 1, Columns: testColumns}

// testRows yields n rows with bodyLen-byte bodies; row i is the same on
// every call.
func testRows(tb testing.TB, n, bodyLen int) iter.Seq2[Row, error] {
	codec, err := ssp2.NewRowCodec(testColumns)
	if err != nil {
		tb.Fatal(err)
	}
	return func(yield func(Row, error) bool) {
		body := make([]byte, bodyLen)
		vals := make([]ssp2.Value, 3)
		var payload []byte
		for i := range n {
			for j := range body {
				body[j] = 'a' + byte((i+j)%26)
			}
			vals[0] = ssp2.Value{Bytes: fmt.Appendf(nil, "row-%08d", i)}
			vals[1] = ssp2.Value{Int: int64(i)}
			vals[2] = ssp2.Value{Bytes: body}
			payload, err = codec.AppendRow(payload[:0], vals)
			if !yield(Row{ServerVersion: int64(i + 1), Payload: payload}, err) {
				return
			}
		}
	}
}

// segmentBytes builds a rows segment of n rows in memory.
func segmentBytes(tb testing.TB, n, bodyLen int) []byte {
	tb.Helper()
	sp := NewSpool("", 1<<30)
	if _, err := WriteRows(sp, testHeader, testRows(tb, n, bodyLen)); err != nil {
		tb.Fatal(err)
	}
	b, _ := sp.Bytes()
	return b
}

// rowsBuild is a BuildFunc writing n test rows; calls counts its calls.
func rowsBuild(tb testing.TB, n, bodyLen int, calls *atomic.Int64) BuildFunc {
	return func(ctx context.Context, w io.Writer) (int64, string, error) {
		if calls != nil {
			calls.Add(1)
		}
		rows, err := WriteRows(w, testHeader, testRows(tb, n, bodyLen))
		return rows, "", err
	}
}

// testKey is a first-page key.
func testKey(partition, epoch, digest string) storage.SegmentKey {
	return storage.SegmentKey{Partition: partition, LogEpoch: epoch, Table: "tasks", SchemaVersion: 1,
		MediaType: ssp2.MediaRows, ScopeDigest: digest, AsOfCommitSeq: 7, PageRows: 1000}
}

func wantCode(tb testing.TB, err error, code ssp2.Code) {
	tb.Helper()
	if got := ssp2.CodeOf(err); got != code {
		tb.Fatalf("error = %v (code %q), want code %s", err, got, code)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			tb.Fatalf("timed out waiting until %s", what)
		}
	}
}
