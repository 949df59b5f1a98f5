// Package backfill runs the backfill of a checkpoint (package gate): it
// declares the checkpoint for this process, claims it, writes the
// projection in batches — each an ordinary server-authoritative,
// idempotent commit whose write transaction also advances the checkpoint,
// so a batch and its progress commit together — then activates it, and
// runs the pass again when the activation finds a source change above the
// watermark (stale) or a pruned window (unverifiable).
//
// It sits above the engine and the serve gate and drives both through
// narrow interfaces (Writer, Gate). A program embedding a node gets a
// runner wired to it from node.Node.Backfiller.
package backfill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Writer applies server-authoritative commits (implemented by
// *engine.Engine).
type Writer interface {
	PushAuthoritative(ctx context.Context, c engine.AuthoritativeCommit) (engine.AuthoritativeResult, error)
}

// writable is implemented by a Writer that knows partitions it may not
// write (*engine.Engine: those homed on another node).
type writable interface {
	CheckWritable(ctx context.Context, partition string) error
}

// Gate is the part of *gate.Gate the runner drives: the transitions with
// their tokens and events.
type Gate interface {
	Key(partition, name string) storage.CheckpointKey
	Declare(ctx context.Context, partition, name string) (storage.Checkpoint, error)
	Claim(ctx context.Context, key storage.CheckpointKey) (storage.Checkpoint, error)
	Advanced(ctx context.Context, p storage.CheckpointAdvanceParams)
	Activate(ctx context.Context, p storage.CheckpointActivateParams) (storage.ActivateOutcome, error)
}

// Defaults.
const (
	DefaultActor       = "syncnode-backfill"
	DefaultMaxAttempts = 5
)

// Config configures a Runner.
type Config struct {
	Gate   Gate
	Writer Writer
	// Actor is recorded as the actor of backfill commits (default
	// DefaultActor).
	Actor string
	// MaxAttempts bounds the passes of one Run (default
	// DefaultMaxAttempts); each stale or unverifiable activation costs
	// one.
	MaxAttempts int
	// Clock stamps the checkpoint updates (default clock.System).
	Clock  clock.Clock
	Logger *slog.Logger
}

// WithDefaults returns c with unset fields defaulted.
func (c Config) WithDefaults() Config {
	if c.Actor == "" {
		c.Actor = DefaultActor
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	c.Clock = clock.Or(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.Gate == nil || c.Writer == nil {
		errs = append(errs, errors.New("backfill config: Gate and Writer are required"))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("backfill config: MaxAttempts %d must be positive", c.MaxAttempts))
	}
	return errors.Join(errs...)
}

// Runner runs backfills.
type Runner struct {
	cfg Config
	log *slog.Logger
}

// New validates cfg and returns a Runner.
func New(cfg Config) (*Runner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg, log: cfg.Logger}, nil
}

// BatchFunc computes one batch of a backfill pass: the projection writes
// for the source rows after cursor ("" starts a pass), the cursor the
// next batch continues from, and whether the pass is complete. It runs
// inside the batch's write transaction, holding the partition lock, so
// what it reads through tx is consistent with what the batch writes. A
// pass must be repeatable from "": a stale activation runs it again.
type BatchFunc func(ctx context.Context, tx storage.Tx, cursor string) (ops []ssp2.Operation, next string, done bool, err error)

// Job is one checkpoint's backfill in one partition.
type Job struct {
	Partition string
	// Name is the checkpoint's name; its schema version is the running
	// one.
	Name string
	// Sources are the tables the projection is derived from. A change to
	// one of them above the watermark makes the activation stale, unless
	// the backfill itself made it: a projection may be a new column of
	// its own source table.
	Sources []string
	Batch   BatchFunc
}

// Result reports a Run.
type Result struct {
	Outcome storage.ActivateOutcome
	// AlreadyActive is set when the checkpoint was activated before Run.
	AlreadyActive bool
	OwnerEpoch    int64
	Watermark     int64
	// Attempts counts passes; Batches and Rows are those of the last pass.
	Attempts int
	Batches  int
	Rows     int64
}

// Errors.
var (
	// ErrSuperseded is returned when another owner claimed the checkpoint
	// during the run: the batch that noticed rolled back whole.
	ErrSuperseded = errors.New("backfill: superseded by another owner")
	// ErrGaveUp is returned after MaxAttempts passes ended stale or
	// unverifiable.
	ErrGaveUp = errors.New("backfill: no pass activated")
)

// Run declares, claims, backfills and activates job's checkpoint,
// retrying stale and unverifiable activations up to MaxAttempts passes.
func (r *Runner) Run(ctx context.Context, job Job) (Result, error) {
	if job.Batch == nil {
		return Result{}, errors.New("backfill: Job.Batch is required")
	}
	g := r.cfg.Gate
	key := g.Key(job.Partition, job.Name)
	// A partition this node may not write (an edge's, at its hub) is
	// backfilled at its home: declaring here would leave a checkpoint
	// that refuses the replica on every other node and never activates.
	if w, ok := r.cfg.Writer.(writable); ok {
		if err := w.CheckWritable(ctx, job.Partition); err != nil {
			return Result{}, fmt.Errorf("backfill %s: %w", key, err)
		}
	}
	cp, err := g.Declare(ctx, job.Partition, job.Name)
	if err != nil {
		return Result{}, fmt.Errorf("backfill %s: %w", key, err)
	}
	if cp.State == storage.CheckpointActivated {
		return Result{Outcome: storage.ActivateActivated, AlreadyActive: true, OwnerEpoch: cp.OwnerEpoch, Watermark: cp.Watermark}, nil
	}
	var res Result
	for res.Attempts < r.cfg.MaxAttempts {
		res.Attempts++
		cp, err := g.Claim(ctx, key)
		if err != nil {
			return res, fmt.Errorf("backfill %s: %w", key, err)
		}
		res.OwnerEpoch = cp.OwnerEpoch
		if err := r.pass(ctx, job, key, &res); err != nil {
			return res, err
		}
		out, err := g.Activate(ctx, storage.CheckpointActivateParams{CheckpointKey: key, OwnerEpoch: res.OwnerEpoch,
			Watermark: res.Watermark, Sources: job.Sources, OwnClientID: clientID(job), NowMs: r.cfg.Clock.Now().UnixMilli()})
		if err != nil {
			return res, fmt.Errorf("backfill %s: %w", key, err)
		}
		res.Outcome = out
		if out == storage.ActivateActivated {
			r.log.Info("checkpoint activated", "checkpoint", key.String(), "watermark", res.Watermark, "rows", res.Rows, "attempts", res.Attempts)
			return res, nil
		}
		r.log.Info("checkpoint not activated; running the pass again", "checkpoint", key.String(), "outcome", out, "attempt", res.Attempts)
	}
	return res, fmt.Errorf("backfill %s: %w after %d passes (last %s)", key, ErrGaveUp, res.Attempts, res.Outcome)
}

// pass runs one pass of batches under the current owner epoch. The
// watermark is the partition's max commitSeq when the first batch
// locks it: every source row a batch reads is at least that new, and a
// source change after it is what the activation checks for.
func (r *Runner) pass(ctx context.Context, job Job, key storage.CheckpointKey, res *Result) error {
	watermark := int64(-1)
	var rows int64
	cursor := ""
	res.Batches, res.Rows = 0, 0
	for {
		var (
			next     string
			done     bool
			n        int64
			wm       int64
			progress storage.CheckpointAdvanceParams
		)
		batch := res.Batches + 1
		out, err := r.cfg.Writer.PushAuthoritative(ctx, engine.AuthoritativeCommit{
			Partition:      job.Partition,
			ActorID:        r.cfg.Actor,
			ClientID:       clientID(job),
			ClientCommitID: fmt.Sprintf("v%d:e%d:b%d", key.SchemaVersion, res.OwnerEpoch, batch),
			Operations: func(ctx context.Context, tx storage.Tx) ([]ssp2.Operation, error) {
				wm = watermark
				if wm < 0 {
					wm = tx.Locked().MaxCommitSeq
				}
				ops, nx, dn, err := job.Batch(ctx, tx, cursor)
				if err != nil {
					return nil, err
				}
				progress = storage.CheckpointAdvanceParams{CheckpointKey: key, OwnerEpoch: res.OwnerEpoch,
					Watermark: wm, ObservedRows: rows + int64(len(ops)), NowMs: r.cfg.Clock.Now().UnixMilli()}
				ok, err := tx.CheckpointAdvance(ctx, progress)
				if err != nil {
					return nil, err
				}
				if !ok {
					return nil, ErrSuperseded
				}
				next, done, n = nx, dn, int64(len(ops))
				return ops, nil
			},
		})
		if err != nil {
			return fmt.Errorf("backfill %s: batch %d: %w", key, batch, err)
		}
		if out.Replayed {
			return fmt.Errorf("backfill %s: batch %d: its idempotency key was already used", key, batch)
		}
		watermark, rows, cursor = wm, rows+n, next
		res.Batches, res.Rows, res.Watermark = batch, rows, watermark
		r.cfg.Gate.Advanced(ctx, progress)
		if done {
			return nil
		}
	}
}

// clientID is the idempotency namespace of a job's commits, and how the
// activation tells the backfill's own writes from source changes.
func clientID(job Job) string { return "syncnode-backfill:" + job.Name }
