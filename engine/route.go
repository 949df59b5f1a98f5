package engine

import (
	"context"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// Router serves the partitions homed on another node — an edge's, on its
// hub. Their reads come from this node's read replica, which only the
// router writes; their writes are applied by the home, and the results it
// stored are answered here as if this node had applied them. *edge.Hub
// implements it.
type Router interface {
	// Remote reports whether the partition is homed on another node.
	Remote(partition string) bool
	// Forward has the home apply the request's push commits (PushOnly
	// builds the request to send) for the authenticated caller id, and
	// returns the stored result of each, by clientCommitId. A home that
	// cannot be reached is an *ssp2.Error the whole request fails with
	// (sync.schema_not_ready: retryable, nothing was applied here).
	Forward(ctx context.Context, id Identity, req *ssp2.Request) (map[string]storage.PushRecord, error)
	// Ready returns nil when the replica of the partition may be served,
	// else the *ssp2.Error to refuse the request with.
	Ready(ctx context.Context, partition string) error
}

// PushOnly encodes req without its pull half: the frames a home applies
// for a forwarded request.
func PushOnly(req *ssp2.Request) ([]byte, error) {
	frames := make([]ssp2.Frame, 0, len(req.Message.Frames))
	for _, f := range req.Message.Frames {
		switch f.(type) {
		case *ssp2.PullHeader, *ssp2.Subscription:
			continue
		}
		frames = append(frames, f)
	}
	return (&ssp2.Message{WireVersion: req.WireVersion, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
}

// route runs a request of a remote partition up to the point where it
// is served like any other: its commits applied at the home, the
// replica ready.
func (e *Engine) route(ctx context.Context, r *request) error {
	r.remote = true
	if len(r.req.Commits) > 0 {
		recs, err := e.cfg.Router.Forward(ctx, r.id, r.req)
		if err != nil {
			return err
		}
		r.forwarded = recs
	}
	return e.cfg.Router.Ready(ctx, r.id.Partition)
}

// homeMiss answers a commit of a remote partition that its home returned
// no result for with a retryable rejection, persisting nothing: this node
// never applies a remote partition's commit itself.
func (e *Engine) homeMiss(r *request, key string) error {
	e.metrics.PushRejected.Add(1)
	return r.enc.WriteFrame(&ssp2.PushResult{
		ClientCommitID: key,
		Status:         ssp2.PushRejected,
		Results: []ssp2.OpResult{{
			OpIndex: 0, Status: ssp2.OpError,
			Code: string(ssp2.CodeSchemaNotReady), Message: "this partition is homed on another node, which did not apply this commit", Retryable: true,
		}},
	})
}

// guardRemote is checked before any other entry point touches a
// partition (realtime attach, segment download, commands, authoritative
// writes): a remote partition is served only once its replica is ready,
// so no touch registers it under an epoch of this node's; and it is never
// written here but through Sync's forwarding.
func (e *Engine) guardRemote(ctx context.Context, partition string, writes bool) error {
	if e.cfg.Router == nil || !e.cfg.Router.Remote(partition) {
		return nil
	}
	if writes {
		return ssp2.Errorf(ssp2.CodeSchemaNotReady, "this partition is homed on another node: write it there").
			WithDetails(map[string]string{"reason": "remote_home"})
	}
	return e.cfg.Router.Ready(ctx, partition)
}

// CheckWritable returns nil when this node may write the partition's
// log, else the refusal (sync.schema_not_ready, reason remote_home) of a
// partition homed on another node: its authoritative commits and
// backfills run at its home, under the home's serve gate. The backfill
// runner asks before it declares anything.
func (e *Engine) CheckWritable(ctx context.Context, partition string) error {
	return e.guardRemote(ctx, partition, true)
}
