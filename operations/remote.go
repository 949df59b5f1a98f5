package operations

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
)

// RemoteHome runs the commands of partitions homed on another node — an
// edge's, at its hub (*edge.Hub). A command's commit is built under its
// partition's write lock and appended to its log; a partition whose log
// is another node's (the hub's replica of an edge partition) is never
// written here, so the command goes to the home, like a push, and the
// caller gets the home's result. Queries are not forwarded: they read the
// replica, read-only.
type RemoteHome interface {
	// Remote reports whether the partition is homed on another node.
	Remote(partition string) bool
	// ForwardCommand has the home run call (an encoded command request)
	// for id (its scopes resolved here) and returns the home's reply (a
	// ForwardedReply in JSON, as RunForwarded answers it). A home that
	// cannot be reached is an *ssp2.Error: sync.schema_not_ready,
	// retryable, nothing applied anywhere.
	ForwardCommand(ctx context.Context, id engine.Identity, call []byte) ([]byte, error)
	// WaitReplica waits, within a bound of its own, until this node's
	// replica of the partition holds seq, so that what the caller reads
	// next here sees the command's commit.
	WaitReplica(ctx context.Context, partition string, seq int64)
}

// ForwardedReply is a home's answer to a forwarded command: the command's
// result, or the operation error it failed with.
type ForwardedReply struct {
	Status    string          `json:"status,omitempty"`
	CommitSeq int64           `json:"commitSeq,omitempty"`
	Results   []ssp2.OpResult `json:"results,omitempty"`
	Error     *Error          `json:"error,omitempty"`
}

// forwardCommand runs a command of a remote partition at its home.
func (s *Service) forwardCommand(ctx context.Context, id engine.Identity, req Request) (CommandResult, error) {
	call, err := Encode(Object{{"revision", int64(Revision)}, {"kind", "command"}, {"clientId", req.ClientID},
		{"operationId", req.OperationID}, {"requestId", req.RequestID}, {"params", req.Params}})
	if err != nil {
		return CommandResult{}, errorf(CodeInvalidRequest, "encode the command for its home: %v", err)
	}
	b, err := s.cfg.Remote.ForwardCommand(ctx, id, call)
	if err != nil {
		return CommandResult{}, err
	}
	var r ForwardedReply
	if err := json.Unmarshal(b, &r); err != nil {
		return CommandResult{}, errors.New("the home's reply to a forwarded command is not a ForwardedReply")
	}
	if r.Error != nil {
		return CommandResult{}, r.Error
	}
	if r.CommitSeq > 0 {
		s.cfg.Remote.WaitReplica(ctx, id.Partition, r.CommitSeq)
	}
	return CommandResult{Status: r.Status, CommitSeq: r.CommitSeq, Results: r.Results}, nil
}

// RunForwarded runs a command another node forwarded to this one, the
// partition's home (call as ForwardCommand sent it, id as that node
// authenticated it), and returns the ForwardedReply in JSON.
func (s *Service) RunForwarded(ctx context.Context, id engine.Identity, call []byte) []byte {
	var r ForwardedReply
	v, err := Decode(call)
	var req Request
	if err == nil {
		req, err = requestFrom(v, "command")
	} else {
		err = errorf(CodeInvalidRequest, "%v", err)
	}
	if err == nil {
		var res CommandResult
		if res, err = s.Command(ctx, id, req); err == nil {
			r = ForwardedReply{Status: res.Status, CommitSeq: res.CommitSeq, Results: res.Results}
		}
	}
	if err != nil {
		s.metrics.Errors.Add(1)
		e := toError(err)
		if e.Code == CodeExecutionFailed || e.Code == string(ssp2.CodeInternalError) {
			s.log.Error("forwarded operation failed", "partition", id.Partition, "actor", id.ActorID, "operation", req.OperationID, "err", err)
		}
		r = ForwardedReply{Error: e}
	}
	b, _ := json.Marshal(r)
	return b
}
