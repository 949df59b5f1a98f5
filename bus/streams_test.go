package bus

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/syncnode/syncnode/bus/bustest"
	"github.com/syncnode/syncnode/embedded/embeddedtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55.0 starts this goroutine when a JetStream context
		// first publishes asynchronously; if the publisher is cleaned up
		// before it runs, it reads the already cleared status channel and
		// blocks on nil forever (jetstream/publish.go). It is the client's
		// leak, not ours: about one run in ten of this package saw it.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	)
}

func TestEnsureStreamsCreatesAndIsIdempotent(t *testing.T) {
	t.Parallel()
	js := embeddedtest.Start(t).JetStream()
	ctx := bustest.Context(t)
	cfg := StreamsConfig{Commits: StreamConfig{MaxAge: time.Hour, Duplicates: 10 * time.Second, MaxBytes: 1 << 30}}
	if err := EnsureStreams(ctx, js, prod, cfg); err != nil {
		t.Fatalf("first: %v", err)
	}
	if err := EnsureStreams(ctx, js, prod, cfg); err != nil {
		t.Fatalf("second: %v", err)
	}
	s, err := js.Stream(ctx, prod.CommitStream())
	if err != nil {
		t.Fatal(err)
	}
	c := s.CachedInfo().Config
	if c.Subjects[0] != prod.CommitSubjects() || c.MaxAge != time.Hour || c.Duplicates != 10*time.Second ||
		c.MaxBytes != 1<<30 || !c.AllowAtomicPublish || !c.DenyDelete || c.Storage != jetstream.FileStorage {
		t.Errorf("SYNC_COMMITS config = %+v", c)
	}
	ctl, err := js.Stream(ctx, prod.ControlStream())
	if err != nil {
		t.Fatal(err)
	}
	if got := ctl.CachedInfo().Config.Subjects; len(got) != 1 || got[0] != prod.ControlSubjects() {
		t.Errorf("SYNC_CONTROL subjects = %v", got)
	}
}

func TestEnsureStreamsReconcilesDrift(t *testing.T) {
	t.Parallel()
	js := embeddedtest.Start(t).JetStream()
	ctx := bustest.Context(t)
	old := prod.CommitsStreamConfig(StreamConfig{Replicas: 1, MaxAge: time.Minute, MaxBytes: -1, MaxMsgSize: -1, Duplicates: 10 * time.Second}) // the window before DefaultCommitsDuplicates was shortened
	old.AllowAtomicPublish = false
	old.MaxMsgsPerSubject = 10
	old.Metadata = map[string]string{"owner": "ops"}
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := EnsureStreams(ctx, js, prod, StreamsConfig{Commits: StreamConfig{MaxAge: 2 * time.Hour}}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	s, _ := js.Stream(ctx, prod.CommitStream())
	c := s.CachedInfo().Config
	if c.MaxAge != 2*time.Hour || c.Duplicates != DefaultCommitsDuplicates || !c.AllowAtomicPublish || c.MaxMsgsPerSubject != perSubjectBlockSizer {
		t.Errorf("after reconcile: %+v", c)
	}
	if c.Metadata["owner"] != "ops" {
		t.Errorf("operator metadata lost: %v", c.Metadata)
	}
}

// TestCommitStreamBlocksAre4MB: the commit stream's file store writes
// 4 MB blocks, not the 8 MB the server picks for a stream without limits
// (the block being written is held in memory whole), and its per-subject
// limit drops nothing.
func TestCommitStreamBlocksAre4MB(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	js := embeddedtest.Start(t, embeddedtest.WithDataDir(dir), embeddedtest.WithDontListen()).JetStream()
	ctx := bustest.Context(t)
	if err := EnsureStreams(ctx, js, prod, StreamsConfig{}); err != nil {
		t.Fatal(err)
	}
	subj, err := prod.CommitSubject(mustPartition(t, "p"), "t")
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 6 << 10, 1 << 10 // 6 MiB on one subject: one 8 MB block, or two of 4 MB
	body := make([]byte, size)
	for i := range n {
		if _, err := js.Publish(ctx, subj, body); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	s, err := js.Stream(ctx, prod.CommitStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Errorf("stream holds %d events, want all %d", info.State.Msgs, n)
	}
	blocks, err := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", prod.CommitStream(), "msgs", "*.blk"))
	if err != nil {
		t.Fatal(err)
	}
	var largest int64
	for _, b := range blocks {
		if fi, err := os.Stat(b); err == nil {
			largest = max(largest, fi.Size())
		}
	}
	if len(blocks) < 2 || largest > 4<<20 {
		t.Errorf("%d blocks, the largest %d bytes: want 6 MiB in blocks of at most 4 MiB", len(blocks), largest)
	}
}

func TestEnsureStreamsConflicts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		pre   jetstream.StreamConfig
		field string
	}{
		{"other subjects", jetstream.StreamConfig{Name: prod.CommitStream(), Subjects: []string{"other.>"}}, "subjects"},
		{"memory storage", jetstream.StreamConfig{Name: prod.CommitStream(), Subjects: []string{prod.CommitSubjects()}, Storage: jetstream.MemoryStorage}, "storage"},
		{"work queue", jetstream.StreamConfig{Name: prod.CommitStream(), Subjects: []string{prod.CommitSubjects()}, Retention: jetstream.WorkQueuePolicy}, "retention"},
		{"subjects owned by another stream", jetstream.StreamConfig{Name: "APP", Subjects: []string{"sync.>"}}, "subjects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			js := embeddedtest.Start(t, embeddedtest.WithDontListen()).JetStream()
			ctx := bustest.Context(t)
			if _, err := js.CreateStream(ctx, tt.pre); err != nil {
				t.Fatal(err)
			}
			err := EnsureStreams(ctx, js, prod, StreamsConfig{})
			var ce *StreamConflictError
			if !errors.Is(err, ErrStreamConflict) || !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("err = %v, want a StreamConflictError on %s", err, tt.field)
			}
			t.Logf("error reads: %v", err)
			// The existing stream is untouched.
			s, err := js.Stream(ctx, tt.pre.Name)
			if err != nil || s.CachedInfo().Config.Subjects[0] != tt.pre.Subjects[0] {
				t.Errorf("pre-existing stream changed: %v", err)
			}
		})
	}
}

func TestStreamsConfigValidate(t *testing.T) {
	t.Parallel()
	bad := []StreamsConfig{
		{Commits: StreamConfig{Replicas: 7}},
		{Commits: StreamConfig{MaxBytes: -5}},
		{Commits: StreamConfig{Duplicates: time.Millisecond}},
		{Commits: StreamConfig{MaxAge: time.Minute, Duplicates: time.Hour}},
		{Control: StreamConfig{MaxMsgSize: -3}},
	}
	for i, c := range bad {
		if err := c.WithDefaults().Validate(); err == nil {
			t.Errorf("case %d: %+v accepted", i, c)
		}
	}
	if err := (StreamsConfig{}).WithDefaults().Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
	if err := (StreamsConfig{Commits: StreamConfig{MaxAge: -1}}).WithDefaults().Validate(); err != nil {
		t.Errorf("unlimited age refused: %v", err)
	}
}

// Two namespaces on one server keep separate streams; deleting one
// leaves the other, and the production namespace is never deleted.
func TestNamespacesShareAServer(t *testing.T) {
	t.Parallel()
	js := embeddedtest.Start(t).JetStream()
	ctx := bustest.Context(t)
	a, _ := NewNames("a")
	for _, ns := range []Names{prod, a} {
		if err := EnsureStreams(ctx, js, ns, StreamsConfig{}); err != nil {
			t.Fatalf("%s: %v", ns, err)
		}
		if _, err := js.CreateKeyValue(ctx, ns.GateBucketConfig(1)); err != nil {
			t.Fatalf("%s: %v", ns, err)
		}
	}
	if err := DeleteNamespace(ctx, js, prod); !errors.Is(err, ErrProductionNamespace) {
		t.Fatalf("DeleteNamespace(production) = %v", err)
	}
	if err := DeleteNamespace(ctx, js, a); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(ctx, a.CommitStream()); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("%s after delete: %v", a.CommitStream(), err)
	}
	if _, err := js.KeyValue(ctx, a.GateBucket()); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("%s after delete: %v", a.GateBucket(), err)
	}
	for _, s := range []string{prod.CommitStream(), prod.ControlStream()} {
		if _, err := js.Stream(ctx, s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	if _, err := js.KeyValue(ctx, prod.GateBucket()); err != nil {
		t.Errorf("%s: %v", prod.GateBucket(), err)
	}
	// Deleting again finds nothing and is fine.
	if err := DeleteNamespace(ctx, js, a); err != nil {
		t.Fatalf("second delete: %v", err)
	}
}

// TestCheckBounds: the replica and chunk-size rules accept their bounds
// and refuse one past each.
func TestCheckBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		check func(int) error
		ok    []int
		bad   []int
	}{
		{"replicas", CheckReplicas, []int{1, MaxReplicas}, []int{0, -1, MaxReplicas + 1}},
		{"chunk size", CheckChunkSize, []int{MinChunkSize, MaxChunkSize}, []int{0, MinChunkSize - 1, MaxChunkSize + 1}},
	} {
		for _, n := range tc.ok {
			if err := tc.check(n); err != nil {
				t.Errorf("%s %d refused: %v", tc.name, n, err)
			}
		}
		for _, n := range tc.bad {
			if err := tc.check(n); err == nil {
				t.Errorf("%s %d accepted", tc.name, n)
			}
		}
	}
}
