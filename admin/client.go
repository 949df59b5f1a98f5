package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/syncnode/syncnode/bus"
)

// ErrNoNode is returned (wrapped) by Client when no node answers the
// admin subject: none is running, or the user may not reach it.
var ErrNoNode = errors.New("no syncnode answers the admin API")

// DefaultClientTimeout bounds one request of a Client.
const DefaultClientTimeout = 30 * time.Second

// Client calls the admin API over NATS.
type Client struct {
	nc      *nats.Conn
	timeout time.Duration
}

var _ API = (*Client)(nil)

// NewClient returns a client on nc; timeout bounds each request (zero:
// DefaultClientTimeout) unless the context's deadline is sooner.
func NewClient(nc *nats.Conn, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultClientTimeout
	}
	return &Client{nc: nc, timeout: timeout}
}

// Call sends req as JSON to syncnode.admin.<endpoint> and decodes the
// answer into resp: the way to reach an extension's endpoint. An error
// reply is an *Error.
func (c *Client) Call(ctx context.Context, endpoint string, req, resp any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("admin %s: encode request: %w", endpoint, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	subject := bus.AdminSubject(endpoint)
	msg, err := c.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("admin %s: %w on %s: %w", endpoint, ErrNoNode, subject, err)
		}
		return fmt.Errorf("admin %s: %w", endpoint, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return replyError(code, msg)
	}
	if err := json.Unmarshal(msg.Data, resp); err != nil {
		return fmt.Errorf("admin %s: decode answer: %w", endpoint, err)
	}
	return nil
}

// replyError decodes an error reply; a body that is not ours (another
// micro service on the subject) keeps the header's status and text.
func replyError(status string, msg *nats.Msg) error {
	var body errorBody
	if err := json.Unmarshal(msg.Data, &body); err == nil && body.Error != nil && body.Error.Code != "" {
		return body.Error
	}
	e := &Error{Code: CodeInternal, Message: msg.Header.Get(micro.ErrorHeader)}
	if n, err := strconv.Atoi(status); err == nil {
		for _, c := range Codes() {
			if c.Status() == n {
				e.Code = c
			}
		}
	}
	return e
}

func call[Resp any](ctx context.Context, c *Client, endpoint string, req any) (Resp, error) {
	var resp Resp
	err := c.Call(ctx, endpoint, req, &resp)
	return resp, err
}

// NodeInfo implements API: one node's answer (every node answers; the
// first wins).
func (c *Client) NodeInfo(ctx context.Context) (NodeInfo, error) {
	return call[NodeInfo](ctx, c, bus.AdminNodeInfo, Empty{})
}

// Partitions implements API.
func (c *Client) Partitions(ctx context.Context, req PartitionsRequest) (PartitionsResponse, error) {
	return call[PartitionsResponse](ctx, c, bus.AdminPartitionsList, req)
}

// PartitionInfo implements API.
func (c *Client) PartitionInfo(ctx context.Context, req PartitionRequest) (PartitionInfo, error) {
	return call[PartitionInfo](ctx, c, bus.AdminPartitionsInfo, req)
}

// Clients implements API.
func (c *Client) Clients(ctx context.Context, req ClientsRequest) (ClientsResponse, error) {
	return call[ClientsResponse](ctx, c, bus.AdminPartitionsClients, req)
}

// Prune implements API.
func (c *Client) Prune(ctx context.Context, req PruneRequest) (PruneResponse, error) {
	return call[PruneResponse](ctx, c, bus.AdminPartitionsPrune, req)
}

// Checkpoints implements API.
func (c *Client) Checkpoints(ctx context.Context, req CheckpointsRequest) (CheckpointsResponse, error) {
	return call[CheckpointsResponse](ctx, c, bus.AdminCheckpointsList, req)
}

// CheckpointDeclare implements API.
func (c *Client) CheckpointDeclare(ctx context.Context, req DeclareRequest) (Checkpoint, error) {
	return call[Checkpoint](ctx, c, bus.AdminCheckpointsDeclare, req)
}

// CheckpointActivate implements API.
func (c *Client) CheckpointActivate(ctx context.Context, req ActivateRequest) (ActivateResponse, error) {
	return call[ActivateResponse](ctx, c, bus.AdminCheckpointsActivate, req)
}

// Gate implements API.
func (c *Client) Gate(ctx context.Context, req PartitionRequest) (GateInfo, error) {
	return call[GateInfo](ctx, c, bus.AdminCheckpointsGate, req)
}

// RotateEpoch implements API.
func (c *Client) RotateEpoch(ctx context.Context, req PartitionRequest) (RotateEpochResponse, error) {
	return call[RotateEpochResponse](ctx, c, bus.AdminCheckpointsRotate, req)
}

// Republish implements API.
func (c *Client) Republish(ctx context.Context) (RepublishResponse, error) {
	return call[RepublishResponse](ctx, c, bus.AdminCheckpointsRepublish, Empty{})
}

// SegmentStats implements API.
func (c *Client) SegmentStats(ctx context.Context) (SegmentStats, error) {
	return call[SegmentStats](ctx, c, bus.AdminSegmentsStats, Empty{})
}

// SegmentPrune implements API.
func (c *Client) SegmentPrune(ctx context.Context, req SegmentPruneRequest) (SegmentPruneResponse, error) {
	return call[SegmentPruneResponse](ctx, c, bus.AdminSegmentsPrune, req)
}

// LeaseRevoke implements API.
func (c *Client) LeaseRevoke(ctx context.Context, req LeaseRequest) (LeaseResponse, error) {
	return call[LeaseResponse](ctx, c, bus.AdminLeasesRevoke, req)
}

// LeaseClear implements API.
func (c *Client) LeaseClear(ctx context.Context, req LeaseRequest) (LeaseResponse, error) {
	return call[LeaseResponse](ctx, c, bus.AdminLeasesClear, req)
}
