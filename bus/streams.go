package bus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamConfig is the part of a stream's configuration the node owns.
type StreamConfig struct {
	// Replicas is the stream's replication factor (1 on a single node, 3
	// in a cluster of three or more).
	Replicas int
	// MaxAge discards events older than this. Zero means the default; a
	// negative value means no age limit.
	MaxAge time.Duration
	// MaxBytes bounds the stream's size. Zero means the default
	// (unlimited); -1 is unlimited.
	MaxBytes int64
	// MaxMsgSize bounds one event. Zero means the default (the server's
	// max payload); -1 is unlimited.
	MaxMsgSize int32
	// Duplicates is the Nats-Msg-Id deduplication window (100 ms or
	// more). The relay does not depend on it for correctness (it
	// compare-and-sets on the partition's last sequence): a replay the
	// window catches is refused as a duplicate, one it misses as a
	// wrong last sequence, and the relay resynchronises on both. A
	// stream created with another window is updated on start.
	Duplicates time.Duration
	// DiscardNew refuses new events when a limit is reached instead of
	// dropping the oldest: at an edge with MaxBytes this pushes back into
	// the commit log, which keeps everything, until the link returns.
	DiscardNew bool
}

// StreamsConfig configures SYNC_COMMITS and SYNC_CONTROL.
type StreamsConfig struct {
	Commits StreamConfig
	Control StreamConfig
}

// Defaults.
const (
	DefaultCommitsMaxAge = 30 * 24 * time.Hour
	// DefaultCommitsDuplicates is short because the relay does not need
	// the window: every publish, single or atomic batch, carries
	// Nats-Expected-Last-Subject-Sequence, which nats-server checks right
	// after the id (server stream.go processJetStreamMsg; the batch
	// pre-check in jetstream_batching.go). A retry of a timed-out publish
	// whose first attempt was stored comes after PublishTimeout and a
	// backoff; inside the window it is answered "duplicate", outside it
	// "wrong last sequence", and the relay re-reads the stream's last
	// event on either (TestRelayForgottenAck covers both, for batches
	// and singles). A restarted relay reads the last event before it
	// publishes (TestRelayRestartAfterDuplicateWindow). The relay is the
	// only publisher of the stream. The server keeps every id of the
	// window in memory (~160 bytes each, the commit rate times the
	// window): 10 s at 3,600 commits/s held ~5.7 MB of live heap, 1 s
	// holds ~0.6 MB. nats-server accepts no window under 100 ms and
	// reads 0 as its default of 2 minutes, so the window cannot be off;
	// 1 s keeps the purge timer's wake-ups at about one a second.
	DefaultCommitsDuplicates = time.Second
	DefaultControlMaxAge     = 365 * 24 * time.Hour
	DefaultControlDuplicates = time.Hour
)

func (c StreamConfig) withDefaults(maxAge, dup time.Duration) StreamConfig {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.MaxAge == 0 {
		c.MaxAge = maxAge
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = -1
	}
	if c.MaxMsgSize == 0 {
		c.MaxMsgSize = -1
	}
	if c.Duplicates == 0 {
		c.Duplicates = dup
	}
	return c
}

// WithDefaults returns c with zero fields set to their defaults.
func (c StreamsConfig) WithDefaults() StreamsConfig {
	c.Commits = c.Commits.withDefaults(DefaultCommitsMaxAge, DefaultCommitsDuplicates)
	c.Control = c.Control.withDefaults(DefaultControlMaxAge, DefaultControlDuplicates)
	return c
}

// MaxReplicas is the largest replication factor JetStream gives a
// stream, KV bucket or object store.
const MaxReplicas = 5

// CheckReplicas refuses a replication factor outside 1..MaxReplicas: the
// rule of every stream, KV bucket and object store a node creates. The
// error names the value, not the field: callers prefix theirs.
func CheckReplicas(n int) error {
	if n < 1 || n > MaxReplicas {
		return fmt.Errorf("%d outside 1..%d", n, MaxReplicas)
	}
	return nil
}

func (c StreamConfig) validate(name string) error {
	var errs []error
	if err := CheckReplicas(c.Replicas); err != nil {
		errs = append(errs, fmt.Errorf("%s: Replicas %w", name, err))
	}
	if c.MaxBytes < -1 || c.MaxBytes == 0 {
		errs = append(errs, fmt.Errorf("%s: MaxBytes %d must be positive or -1", name, c.MaxBytes))
	}
	if c.MaxMsgSize < -1 || c.MaxMsgSize == 0 {
		errs = append(errs, fmt.Errorf("%s: MaxMsgSize %d must be positive or -1", name, c.MaxMsgSize))
	}
	if c.Duplicates < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("%s: Duplicates %v below 100ms", name, c.Duplicates))
	}
	if c.MaxAge > 0 && c.Duplicates > c.MaxAge {
		errs = append(errs, fmt.Errorf("%s: Duplicates %v longer than MaxAge %v", name, c.Duplicates, c.MaxAge))
	}
	if c.MaxAge > 0 && c.MaxAge < time.Second {
		errs = append(errs, fmt.Errorf("%s: MaxAge %v below 1s", name, c.MaxAge))
	}
	return errors.Join(errs...)
}

// Validate reports invalid fields (call after WithDefaults).
func (c StreamsConfig) Validate() error {
	return errors.Join(
		c.Commits.validate("streams config: Commits"),
		c.Control.validate("streams config: Control"),
	)
}

// ErrStreamConflict matches every *StreamConflictError.
var ErrStreamConflict = errors.New("stream conflict")

// StreamConflictError is returned by EnsureStreams when a stream exists
// with settings the node cannot reconcile without losing or misrouting
// data (other subjects, storage type, retention, a mirror, sealed), or
// when another stream already owns the subjects. An operator must fix or
// remove the stream.
type StreamConflictError struct {
	Stream string
	Field  string
	Have   string
	Want   string
	Err    error // the server's error, if any
}

func (e *StreamConflictError) Error() string {
	s := fmt.Sprintf("stream %s: conflicting %s: have %s, want %s (fix or remove the stream)", e.Stream, e.Field, e.Have, e.Want)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is matches ErrStreamConflict.
func (e *StreamConflictError) Is(target error) bool { return target == ErrStreamConflict }

// Unwrap returns the server's error.
func (e *StreamConflictError) Unwrap() error { return e.Err }

// CommitsStreamConfig is the full JetStream configuration of the commit
// stream for c.
func (n Names) CommitsStreamConfig(c StreamConfig) jetstream.StreamConfig {
	return streamConfig(n.CommitStream(), n.CommitSubjects(), "syncnode commit events (CloudEvents, one per commit and table)", c)
}

// ControlStreamConfig is the full JetStream configuration of the control
// stream for c.
func (n Names) ControlStreamConfig(c StreamConfig) jetstream.StreamConfig {
	return streamConfig(n.ControlStream(), n.ControlSubjects(), "syncnode control events (serve gate, migrations)", c)
}

func streamConfig(name, subject, desc string, c StreamConfig) jetstream.StreamConfig {
	sc := jetstream.StreamConfig{
		Name:         name,
		Description:  desc,
		Subjects:     []string{subject},
		Retention:    jetstream.LimitsPolicy,
		Storage:      jetstream.FileStorage,
		MaxConsumers: -1,
	}
	applyOwned(&sc, c)
	return sc
}

// perSubjectBlockSizer is the per-subject message limit of the node's
// streams: no limit in effect (no partition and table reaches 2^63
// events), set for the file store's block size. nats-server sizes a
// stream's blocks from its limits and keeps the block being written in
// memory, whole, while it is written and read (the followers read every
// event as it lands), plus a pooled buffer of the same size: 8 MB blocks
// for a stream with no limit, 4 MB with a per-subject one (server
// stream.go, autoTuneFileStorageBlockSize). Under push + pull at 20
// clients the 8 MB tail and its pooled twin were half the live heap; with
// 4 MB blocks the peak RSS fell 80 → 69 MiB at the same rate (README,
// "What keeps a node resident"). A MaxBytes limit, when configured, takes
// precedence in the server's sizing. Blocks are sized when the store
// opens, so a stream created before this takes them at the next restart.
const perSubjectBlockSizer = math.MaxInt64

// applyOwned writes the fields the node owns into sc.
func applyOwned(sc *jetstream.StreamConfig, c StreamConfig) {
	sc.Replicas = c.Replicas
	sc.MaxAge = max(c.MaxAge, 0)
	sc.MaxBytes = c.MaxBytes
	sc.MaxMsgSize = c.MaxMsgSize
	sc.Duplicates = c.Duplicates
	sc.Discard = jetstream.DiscardOld
	if c.DiscardNew {
		sc.Discard = jetstream.DiscardNew
	}
	// Count limits would silently drop events a consumer expects.
	sc.MaxMsgs = -1
	sc.MaxMsgsPerSubject = perSubjectBlockSizer
	sc.AllowAtomicPublish = true
	sc.AllowDirect = true
	sc.DenyDelete = true
}

// EnsureStreams creates the commit and control streams of names, or
// reconciles them: compatible drift (limits, replicas, duplicate window,
// atomic publish) is updated in place, incompatible settings give a
// *StreamConflictError.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, names Names, cfg StreamsConfig) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := ensureStream(ctx, js, names.CommitsStreamConfig(cfg.Commits), cfg.Commits); err != nil {
		return err
	}
	return ensureStream(ctx, js, names.ControlStreamConfig(cfg.Control), cfg.Control)
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig, owned StreamConfig) error {
	_, err := js.CreateStream(ctx, want)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
		// Reconcile below.
	case IsAPIError(err, JSErrSubjectOverlap):
		return &StreamConflictError{Stream: want.Name, Field: "subjects", Have: "bound by another stream", Want: fmt.Sprint(want.Subjects), Err: err}
	default:
		return fmt.Errorf("ensure stream %s: %w", want.Name, err)
	}

	s, err := js.Stream(ctx, want.Name)
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", want.Name, err)
	}
	have := s.CachedInfo().Config
	if err := checkCompatible(have, want); err != nil {
		return err
	}
	next := have
	applyOwned(&next, owned)
	if ownedEqual(have, next) {
		return nil
	}
	if _, err := js.UpdateStream(ctx, next); err != nil {
		return fmt.Errorf("ensure stream %s: reconcile settings: %w", want.Name, err)
	}
	return nil
}

func checkCompatible(have, want jetstream.StreamConfig) error {
	conflict := func(field string, h, w any) error {
		return &StreamConflictError{Stream: want.Name, Field: field, Have: fmt.Sprint(h), Want: fmt.Sprint(w)}
	}
	switch {
	case !slices.Equal(have.Subjects, want.Subjects):
		return conflict("subjects", have.Subjects, want.Subjects)
	case have.Storage != want.Storage:
		return conflict("storage", have.Storage, want.Storage)
	case have.Retention != want.Retention:
		return conflict("retention", have.Retention, want.Retention)
	case have.Mirror != nil:
		return conflict("mirror", have.Mirror.Name, "none")
	case have.Sealed:
		return conflict("sealed", true, false)
	case have.AllowMsgCounter:
		return conflict("allow_msg_counter", true, false)
	case have.NoAck:
		return conflict("no_ack", true, false)
	}
	return nil
}

func ownedEqual(a, b jetstream.StreamConfig) bool {
	return a.Replicas == b.Replicas && a.MaxAge == b.MaxAge && a.MaxBytes == b.MaxBytes &&
		a.MaxMsgSize == b.MaxMsgSize && a.Duplicates == b.Duplicates && a.Discard == b.Discard &&
		a.MaxMsgs == b.MaxMsgs && a.MaxMsgsPerSubject == b.MaxMsgsPerSubject &&
		a.AllowAtomicPublish == b.AllowAtomicPublish && a.AllowDirect == b.AllowDirect && a.DenyDelete == b.DenyDelete
}

// JetStream API error codes the bus and the relay react to (nats-server's
// server/errors.json).
const (
	JSErrStreamNotFound           jetstream.ErrorCode = 10059
	JSErrSubjectOverlap           jetstream.ErrorCode = 10065
	JSErrWrongLastSequence        jetstream.ErrorCode = 10071
	JSErrDuplicateMessageConflict jetstream.ErrorCode = 10158
	JSErrWrongLastSequenceConst   jetstream.ErrorCode = 10164
	JSErrBatchPublishDisabled     jetstream.ErrorCode = 10174
	JSErrBatchDuplicateMsgID      jetstream.ErrorCode = 10201
)

// IsAPIError reports whether err is a JetStream API error with one of
// codes.
func IsAPIError(err error, codes ...jetstream.ErrorCode) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return slices.Contains(codes, apiErr.ErrorCode)
}

// KVStream is the stream backing a JetStream KV bucket.
func KVStream(bucket string) string { return "KV_" + bucket }

// EnsureReplicas sets the replication factor of an existing stream (a KV
// bucket's or an object store's backing stream too) to replicas, so a
// bucket created by a single node follows it into a cluster.
func EnsureReplicas(ctx context.Context, js jetstream.JetStream, stream string, replicas int) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	cfg := s.CachedInfo().Config
	if cfg.Replicas == replicas {
		return nil
	}
	cfg.Replicas = replicas
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("stream %s: set replicas %d: %w", stream, replicas, err)
	}
	return nil
}
