package reactions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/admin"
	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/internal/clock"
	"github.com/syncnode/syncnode/internal/ids"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// AdminAPI is the operator's side of reactions: the admin endpoints
// syncnode.admin.reactions.{list,show,retry,prune,stats}. *Admin
// implements it over a store (and answers the endpoints as an
// admin.Extension), *AdminClient over NATS, so `syncnode reactions` runs
// the same operations against a running node or, offline, the store.
type AdminAPI interface {
	List(ctx context.Context, req ListRequest) (ListResponse, error)
	Show(ctx context.Context, req KeyRequest) (Info, error)
	Retry(ctx context.Context, req KeyRequest) (RetryResponse, error)
	Prune(ctx context.Context, req PruneRequest) (PruneResponse, error)
	Stats(ctx context.Context) (AdminStats, error)
}

// AdminStore is what the operations read and change (storage.Store).
type AdminStore interface {
	ReactionGet(ctx context.Context, key storage.ReactionKey) (storage.Reaction, bool, error)
	ReactionList(ctx context.Context, p storage.ReactionListParams) ([]storage.Reaction, error)
	ReactionRetry(ctx context.Context, key storage.ReactionKey, nowMs int64) (bool, error)
	ReactionPrune(ctx context.Context, p storage.ReactionPruneParams) (storage.ReactionPruneResult, error)
	ReactionCounts(ctx context.Context) (storage.ReactionCounts, error)
}

// AdminConfig configures the operations.
type AdminConfig struct {
	Store AdminStore // required
	// Conn publishes the requeued event of a retry, which wakes the
	// runners at once; nil leaves the retry to their next sweep.
	Conn *nats.Conn
	// Names is the bus namespace of the requeued event.
	Names bus.Names
	// Node names the answering node (ce-source of requeued, stats).
	Node string
	// Runner is this node's runner, whose counters stats reports; nil
	// when the node runs none (or offline).
	Runner *Runner
	Clock  clock.Clock // default clock.System
	Logger *slog.Logger
}

// Admin runs the reactions operations; as an admin.Extension it adds them
// to a node's admin service.
type Admin struct{ cfg AdminConfig }

var (
	_ AdminAPI        = (*Admin)(nil)
	_ AdminAPI        = (*AdminClient)(nil)
	_ admin.Extension = (*Admin)(nil)
)

// NewAdmin returns the operations over cfg.Store.
func NewAdmin(cfg AdminConfig) (*Admin, error) {
	if cfg.Store == nil {
		return nil, errors.New("reactions admin: Store: required")
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Node == "" {
		cfg.Node = "syncnode"
	}
	return &Admin{cfg: cfg}, nil
}

// AdminEndpoints implements admin.Extension. Every endpoint reads or
// changes the shared table, so one node of the deployment answers.
func (a *Admin) AdminEndpoints() []admin.Endpoint {
	return []admin.Endpoint{
		{Name: bus.AdminReactionsList, Handler: admin.Handle(a.List)},
		{Name: bus.AdminReactionsShow, Handler: admin.Handle(a.Show)},
		{Name: bus.AdminReactionsRetry, Handler: admin.Handle(a.Retry)},
		{Name: bus.AdminReactionsPrune, Handler: admin.Handle(a.Prune)},
		{Name: bus.AdminReactionsStats, Handler: admin.Handle(func(ctx context.Context, _ admin.Empty) (AdminStats, error) { return a.Stats(ctx) })},
	}
}

// Limits of the operations.
const (
	// DefaultListLimit is the rows a list returns when it asks none.
	DefaultListLimit = 100
	// MaxIdempotencyKeyBytes bounds a key in a request: the JSON array of
	// four identifiers of at most ids.MaxBytes each.
	MaxIdempotencyKeyBytes = 4*ids.MaxBytes + 64
)

// Info is a reaction as the admin API answers it.
type Info struct {
	Partition            string                   `json:"partition"`
	IdempotencyKey       string                   `json:"idempotencyKey"`
	Type                 string                   `json:"type"`
	Version              int32                    `json:"version"`
	Status               storage.ReactionStatus   `json:"status"`
	Attempts             int32                    `json:"attempts"`
	MaxAttempts          int32                    `json:"maxAttempts"`
	Payload              json.RawMessage          `json:"payload"`
	SourceClientID       string                   `json:"sourceClientId"`
	SourceClientCommitID string                   `json:"sourceClientCommitId"`
	SourceCommitSeq      int64                    `json:"sourceCommitSeq"`
	CreatedAtMs          int64                    `json:"createdAtMs"`
	AvailableAtMs        int64                    `json:"availableAtMs"`
	LeaseOwner           string                   `json:"leaseOwner,omitempty"`
	LeaseExpiresAtMs     int64                    `json:"leaseExpiresAtMs,omitempty"`
	CompletedAtMs        int64                    `json:"completedAtMs,omitempty"`
	Failure              *storage.ReactionFailure `json:"failure,omitempty"`
}

// InfoOf is r as the admin API answers it.
func InfoOf(r storage.Reaction) Info {
	return Info{r.Partition, r.IdempotencyKey, r.Type, r.Version, r.Status, r.Attempts, r.MaxAttempts, r.Payload,
		r.SourceClientID, r.SourceClientCommitID, r.SourceCommitSeq, r.CreatedAtMs, r.AvailableAtMs, r.LeaseOwner,
		r.LeaseExpiresAtMs, r.CompletedAtMs, r.Failure}
}

// ListRequest filters reactions.list; every filter given must match.
type ListRequest struct {
	// Partition restricts the listing to one partition; absent lists
	// every partition.
	Partition *string `json:"partition,omitempty"`
	// Statuses (pending, leased, completed, dead-letter) and Types
	// restrict it; absent or empty means any.
	Statuses []storage.ReactionStatus `json:"statuses,omitempty"`
	Types    []string                 `json:"types,omitempty"`
	// Limit bounds the rows (1..1000; absent: 100).
	Limit int `json:"limit,omitempty"`
}

// ListResponse is the answer of reactions.list: newest first.
type ListResponse struct {
	Reactions []Info `json:"reactions"`
}

// KeyRequest names one reaction (reactions.show, reactions.retry).
type KeyRequest struct {
	Partition string `json:"partition"`
	// IdempotencyKey is the stored key, the JSON array
	// ["<partition>","<clientId>","<clientCommitId>","<key>"].
	IdempotencyKey string `json:"idempotencyKey"`
}

// RetryResponse is the answer of reactions.retry.
type RetryResponse struct {
	// Reaction is the row after the retry: pending, due now, attempts 0.
	Reaction Info `json:"reaction"`
	// Woken reports whether the requeued event went out; when false the
	// runners pick the reaction up at their next sweep (WakeError says
	// why).
	Woken     bool   `json:"woken"`
	WakeError string `json:"wakeError,omitempty"`
}

// PruneRequest is one pruning pass of reactions.prune: at most Limit
// terminal rows older than the cutoffs. Pending and leased rows are never
// pruned.
type PruneRequest struct {
	// Partition restricts the pass to one partition; absent prunes every
	// partition.
	Partition *string `json:"partition,omitempty"`
	// CompletedOlderThanMs and DeadLetterOlderThanMs are the ages past
	// which completed rows and dead letters go (absent: the retention
	// defaults, 30 and 90 days; 0: every one up to now).
	CompletedOlderThanMs  *int64 `json:"completedOlderThanMs,omitempty"`
	DeadLetterOlderThanMs *int64 `json:"deadLetterOlderThanMs,omitempty"`
	// Limit bounds the rows of the pass (1..1000; absent: 1000).
	Limit int `json:"limit,omitempty"`
}

// PruneResponse reports one pruning pass.
type PruneResponse struct {
	Completed  int64 `json:"completed"`
	DeadLetter int64 `json:"deadLetter"`
	// MayHaveMore is set when the pass hit its limit: ask again.
	MayHaveMore bool `json:"mayHaveMore"`
}

// AdminStats is the answer of reactions.stats.
type AdminStats struct {
	// Counts are the rows of every partition by status.
	Counts StatusCounts `json:"counts"`
	// Node is the answering node; Runner its runner's counters since it
	// started (absent when that node runs no runner).
	Node   string       `json:"node"`
	Runner *RunnerStats `json:"runner,omitempty"`
}

// StatusCounts are row counts by status.
type StatusCounts struct {
	Pending    int64 `json:"pending"`
	Leased     int64 `json:"leased"`
	Completed  int64 `json:"completed"`
	DeadLetter int64 `json:"deadLetter"`
}

// RunnerStats is a snapshot of a Runner's Stats.
type RunnerStats struct {
	Claims       int64 `json:"claims"`
	Claimed      int64 `json:"claimed"`
	Completed    int64 `json:"completed"`
	Failed       int64 `json:"failed"`
	DeadLettered int64 `json:"deadLettered"`
	LostLeases   int64 `json:"lostLeases"`
	Pruned       int64 `json:"pruned"`
	// InFlight are the reactions claimed and not yet recorded.
	InFlight int `json:"inFlight"`
}

func invalid(format string, args ...any) error {
	return &admin.Error{Code: admin.CodeInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

// checkKey refuses a request that names no reaction a store can hold.
func checkKey(req KeyRequest) (storage.ReactionKey, error) {
	if req.Partition == "" {
		return storage.ReactionKey{}, invalid("partition is required")
	}
	if err := ids.Check("partition", req.Partition); err != nil {
		return storage.ReactionKey{}, invalid("%v", err)
	}
	switch k := req.IdempotencyKey; {
	case k == "":
		return storage.ReactionKey{}, invalid("idempotencyKey is required")
	case len(k) > MaxIdempotencyKeyBytes:
		return storage.ReactionKey{}, invalid("idempotencyKey is %d bytes, the limit is %d", len(k), MaxIdempotencyKeyBytes)
	case !utf8.ValidString(k) || !ids.Storable(k):
		return storage.ReactionKey{}, invalid("idempotencyKey is not valid UTF-8 without U+0000")
	}
	return storage.ReactionKey{Partition: req.Partition, IdempotencyKey: req.IdempotencyKey}, nil
}

// scope turns an optional partition into the store's filter.
func scope(p *string) (partition string, all bool, err error) {
	if p == nil {
		return "", true, nil
	}
	if *p == "" {
		return "", false, invalid("partition is empty (leave it out for every partition)")
	}
	if err := ids.Check("partition", *p); err != nil {
		return "", false, invalid("%v", err)
	}
	return *p, false, nil
}

func limitOf(n, def int) (int, error) {
	switch {
	case n == 0:
		return def, nil
	case n < 0 || n > storage.MaxReactionBatch:
		return 0, invalid("limit %d outside 1..%d", n, storage.MaxReactionBatch)
	}
	return n, nil
}

// storeError is a store failure as an admin error: a bad parameter the
// store refused is the request's fault, anything else internal.
func storeError(op string, err error) error {
	var ae *admin.Error
	if errors.As(err, &ae) {
		return ae
	}
	e := &admin.Error{Code: admin.CodeInternal, Message: op + ": " + err.Error()}
	if c := ssp2.CodeOf(err); c != "" {
		e.SyncCode = c
		if c == ssp2.CodeStorageInvalidReaction || c == ssp2.CodeStorageInvalidLimit {
			e.Code = admin.CodeInvalidRequest
		}
	}
	if e.Code == admin.CodeInternal && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		e.Code = admin.CodeUnavailable
	}
	return e
}

// List implements AdminAPI.
func (a *Admin) List(ctx context.Context, req ListRequest) (ListResponse, error) {
	partition, all, err := scope(req.Partition)
	if err != nil {
		return ListResponse{}, err
	}
	limit, err := limitOf(req.Limit, DefaultListLimit)
	if err != nil {
		return ListResponse{}, err
	}
	for _, s := range req.Statuses {
		if !s.Valid() {
			return ListResponse{}, invalid("statuses: unknown status %q (pending, leased, completed, dead-letter)", s)
		}
	}
	for _, t := range req.Types {
		if err := storage.CheckReactionType(t); err != nil {
			return ListResponse{}, invalid("types: %v", err)
		}
	}
	rs, err := a.cfg.Store.ReactionList(ctx, storage.ReactionListParams{Partition: partition, AllPartitions: all,
		Statuses: req.Statuses, Types: req.Types, Limit: limit})
	if err != nil {
		return ListResponse{}, storeError("list reactions", err)
	}
	out := ListResponse{Reactions: make([]Info, len(rs))}
	for i, r := range rs {
		out.Reactions[i] = InfoOf(r)
	}
	return out, nil
}

// Show implements AdminAPI: an absent reaction is admin.not_found.
func (a *Admin) Show(ctx context.Context, req KeyRequest) (Info, error) {
	k, err := checkKey(req)
	if err != nil {
		return Info{}, err
	}
	r, ok, err := a.cfg.Store.ReactionGet(ctx, k)
	if err != nil {
		return Info{}, storeError("get reaction", err)
	}
	if !ok {
		return Info{}, &admin.Error{Code: admin.CodeNotFound, Message: fmt.Sprintf("no reaction %s in partition %q", k.IdempotencyKey, k.Partition)}
	}
	return InfoOf(r), nil
}

// Retry implements AdminAPI: a dead letter becomes pending, due now,
// with attempts 0 and no failure, and the requeued event wakes the
// runners. An absent reaction is admin.not_found, one that is not a dead
// letter admin.conflict; either changes nothing.
func (a *Admin) Retry(ctx context.Context, req KeyRequest) (RetryResponse, error) {
	k, err := checkKey(req)
	if err != nil {
		return RetryResponse{}, err
	}
	now := a.cfg.Clock.Now()
	ok, err := a.cfg.Store.ReactionRetry(ctx, k, now.UnixMilli())
	if err != nil {
		return RetryResponse{}, storeError("retry reaction", err)
	}
	r, found, err := a.cfg.Store.ReactionGet(ctx, k)
	if err != nil {
		return RetryResponse{}, storeError("get reaction", err)
	}
	switch {
	case !found:
		return RetryResponse{}, &admin.Error{Code: admin.CodeNotFound, Message: fmt.Sprintf("no reaction %s in partition %q", k.IdempotencyKey, k.Partition)}
	case !ok:
		return RetryResponse{}, &admin.Error{Code: admin.CodeConflict, Message: fmt.Sprintf("reaction %s in partition %q is %s, not a dead letter", k.IdempotencyKey, k.Partition, r.Status)}
	}
	out := RetryResponse{Reaction: InfoOf(r)}
	if a.cfg.Conn == nil {
		out.WakeError = "no NATS connection"
		return out, nil
	}
	if err := PublishRequeued(a.cfg.Conn, a.cfg.Names, a.cfg.Node, r, now); err != nil {
		a.cfg.Logger.Warn("reactions: retry could not wake the runners; they pick it up at their next sweep", "err", err)
		out.WakeError = err.Error()
		return out, nil
	}
	out.Woken = true
	return out, nil
}

// Prune implements AdminAPI: one bounded pass.
func (a *Admin) Prune(ctx context.Context, req PruneRequest) (PruneResponse, error) {
	partition, all, err := scope(req.Partition)
	if err != nil {
		return PruneResponse{}, err
	}
	limit, err := limitOf(req.Limit, storage.MaxReactionBatch)
	if err != nil {
		return PruneResponse{}, err
	}
	age := func(field string, v *int64, def int64) (int64, error) {
		switch {
		case v == nil:
			return def, nil
		case *v < 0:
			return 0, invalid("%s: %d is negative", field, *v)
		}
		return *v, nil
	}
	completed, err := age("completedOlderThanMs", req.CompletedOlderThanMs, DefaultCompletedRetention.Milliseconds())
	if err != nil {
		return PruneResponse{}, err
	}
	dead, err := age("deadLetterOlderThanMs", req.DeadLetterOlderThanMs, DefaultDeadLetterRetention.Milliseconds())
	if err != nil {
		return PruneResponse{}, err
	}
	now := a.cfg.Clock.Now().UnixMilli()
	res, err := a.cfg.Store.ReactionPrune(ctx, storage.ReactionPruneParams{Partition: partition, AllPartitions: all,
		CompletedBeforeMs: now - completed, DeadLetterBeforeMs: now - dead, Limit: limit})
	if err != nil {
		return PruneResponse{}, storeError("prune reactions", err)
	}
	return PruneResponse{Completed: res.Completed, DeadLetter: res.DeadLetter, MayHaveMore: res.MayHaveMore}, nil
}

// Stats implements AdminAPI.
func (a *Admin) Stats(ctx context.Context) (AdminStats, error) {
	c, err := a.cfg.Store.ReactionCounts(ctx)
	if err != nil {
		return AdminStats{}, storeError("count reactions", err)
	}
	out := AdminStats{Node: a.cfg.Node, Counts: StatusCounts{Pending: c.Pending, Leased: c.Leased, Completed: c.Completed, DeadLetter: c.DeadLetter}}
	if r := a.cfg.Runner; r != nil {
		s := r.Stats()
		r.mu.Lock()
		inflight := r.inflight
		r.mu.Unlock()
		out.Runner = &RunnerStats{Claims: s.Claims.Load(), Claimed: s.Claimed.Load(), Completed: s.Completed.Load(),
			Failed: s.Failed.Load(), DeadLettered: s.DeadLettered.Load(), LostLeases: s.LostLeases.Load(), Pruned: s.Pruned.Load(),
			InFlight: inflight}
	}
	return out, nil
}

// AdminClient calls the reactions endpoints of a running node.
type AdminClient struct{ c *admin.Client }

// NewAdminClient returns the reactions endpoints over c.
func NewAdminClient(c *admin.Client) *AdminClient { return &AdminClient{c: c} }

func callAdmin[Resp any](ctx context.Context, c *AdminClient, endpoint string, req any) (Resp, error) {
	var resp Resp
	err := c.c.Call(ctx, endpoint, req, &resp)
	return resp, err
}

// List implements AdminAPI.
func (c *AdminClient) List(ctx context.Context, req ListRequest) (ListResponse, error) {
	return callAdmin[ListResponse](ctx, c, bus.AdminReactionsList, req)
}

// Show implements AdminAPI.
func (c *AdminClient) Show(ctx context.Context, req KeyRequest) (Info, error) {
	return callAdmin[Info](ctx, c, bus.AdminReactionsShow, req)
}

// Retry implements AdminAPI.
func (c *AdminClient) Retry(ctx context.Context, req KeyRequest) (RetryResponse, error) {
	return callAdmin[RetryResponse](ctx, c, bus.AdminReactionsRetry, req)
}

// Prune implements AdminAPI.
func (c *AdminClient) Prune(ctx context.Context, req PruneRequest) (PruneResponse, error) {
	return callAdmin[PruneResponse](ctx, c, bus.AdminReactionsPrune, req)
}

// Stats implements AdminAPI.
func (c *AdminClient) Stats(ctx context.Context) (AdminStats, error) {
	return callAdmin[AdminStats](ctx, c, bus.AdminReactionsStats, admin.Empty{})
}
