package storage

import "context"

// RequestStarter is implemented by a Store that reads the start of a sync
// request in one read: what PartitionTouchClient returns and the stored
// push results of the request's commits (what Store.IdempotencyGet
// returns for each), so a steady push + pull round reads nothing more
// before its write transaction. It is optional: the engine falls back to
// PartitionTouchClient and IdempotencyGet on a Store without it.
type RequestStarter interface {
	RequestStart(ctx context.Context, p RequestStartParams) (RequestStart, error)
}

// RequestStartParams names what a request starts with.
type RequestStartParams struct {
	Partition string
	ClientID  string
	// CommitIDs are the clientCommitIds of the request's commits whose
	// stored results to read (ids the caller checked are storable).
	CommitIDs []string
	// PushClientID is the client id of the commits' idempotency keys when
	// it is not ClientID: a server command is keyed under an id derived
	// from its caller's, while the client record read is the caller's.
	// Empty means ClientID.
	PushClientID string
	NowMs        int64
	// Fresh reads the database even where the store could answer from
	// its cache: the caller is about to refuse or reset on what it got.
	Fresh bool
}

// RequestStart is the start of a request: the touched partition row, the
// client record (HasClient false when there is none) and the stored push
// results of RequestStartParams.CommitIDs that exist, by clientCommitId.
// The results are the optimistic lookup of the push path: the write
// transaction re-checks under the lock.
//
// A store that caches the partition row and the client record (Cached
// true) answers with what it holds, current but for two things: the
// partition's MaxCommitSeq and HorizonSeq may be behind (every
// transaction that serves reads them again), and Pushes was not read
// (nil): every commit counts as a miss of the optimistic lookup, which
// the write transaction's locked lookup corrects. The epoch, the epoch
// requirement and the client record reflect every write that committed
// before RequestStart was called, this node's and any other's.
type RequestStart struct {
	Partition Partition
	Client    Client
	HasClient bool
	Pushes    map[string]PushRecord
	Cached    bool
}
