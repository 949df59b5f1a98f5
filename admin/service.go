package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/syncnode/syncnode/bus"
)

// HandlerFunc is one endpoint's operation: a JSON request body in, a
// value to answer as JSON (or an error) out. Handle builds one from a
// typed function.
type HandlerFunc func(ctx context.Context, body []byte) (any, error)

// Handle adapts a typed operation: the body is decoded strictly into Req
// (an empty body is Req's zero value; unknown fields are refused).
func Handle[Req, Resp any](fn func(ctx context.Context, req Req) (Resp, error)) HandlerFunc {
	return func(ctx context.Context, body []byte) (any, error) {
		var req Req
		if err := decodeStrict(body, &req); err != nil {
			return nil, err
		}
		return fn(ctx, req)
	}
}

func decodeStrict(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("request body: %v", err)
	}
	if dec.More() {
		return invalid("request body: more than one JSON value")
	}
	return nil
}

// Endpoint is one admin operation on syncnode.admin.<Name>.
type Endpoint struct {
	// Name is <group>.<op>: lowercase letters, digits and '-', e.g.
	// "reactions.list".
	Name    string
	Handler HandlerFunc
	// EveryNode makes every node answer (no queue group), for node-local
	// state; otherwise one node of the deployment answers.
	EveryNode bool
}

// Extension adds endpoints to the service. It is the seam for the
// reactions endpoints (bus.AdminReactionsGroup): the package that owns
// reactions returns reactions.list, reactions.retry, … and the node
// passes it in Config.Extensions.
type Extension interface {
	AdminEndpoints() []Endpoint
}

var endpointName = regexp.MustCompile(`^[a-z][a-z0-9-]*\.[a-z][a-z0-9-]*$`)

// Endpoints returns the built-in endpoints, in the order `nats micro
// info` lists them.
func (a *Admin) Endpoints() []Endpoint {
	return []Endpoint{
		{Name: bus.AdminNodeInfo, EveryNode: true, Handler: Handle(func(ctx context.Context, _ Empty) (NodeInfo, error) { return a.NodeInfo(ctx) })},
		{Name: bus.AdminPartitionsList, Handler: Handle(a.Partitions)},
		{Name: bus.AdminPartitionsInfo, Handler: Handle(a.PartitionInfo)},
		{Name: bus.AdminPartitionsClients, Handler: Handle(a.Clients)},
		{Name: bus.AdminPartitionsPrune, Handler: Handle(a.Prune)},
		{Name: bus.AdminCheckpointsList, Handler: Handle(a.Checkpoints)},
		{Name: bus.AdminCheckpointsDeclare, Handler: Handle(a.CheckpointDeclare)},
		{Name: bus.AdminCheckpointsActivate, Handler: Handle(a.CheckpointActivate)},
		{Name: bus.AdminCheckpointsGate, Handler: Handle(a.Gate)},
		{Name: bus.AdminCheckpointsRotate, Handler: Handle(a.RotateEpoch)},
		{Name: bus.AdminCheckpointsRepublish, Handler: Handle(func(ctx context.Context, _ Empty) (RepublishResponse, error) { return a.Republish(ctx) })},
		{Name: bus.AdminSegmentsStats, Handler: Handle(func(ctx context.Context, _ Empty) (SegmentStats, error) { return a.SegmentStats(ctx) })},
		{Name: bus.AdminSegmentsPrune, Handler: Handle(a.SegmentPrune)},
		{Name: bus.AdminLeasesRevoke, Handler: Handle(a.LeaseRevoke)},
		{Name: bus.AdminLeasesClear, Handler: Handle(a.LeaseClear)},
	}
}

// Start registers the micro service "syncnode" on Config.Conn with every
// endpoint: built-in ones and the extensions'. ctx is unused: handlers
// run until Stop, each under Config.Timeout.
func (a *Admin) Start(ctx context.Context) error {
	if a.cfg.Conn == nil {
		return errors.New("admin: Start needs Config.Conn")
	}
	eps := a.Endpoints()
	seen := map[string]bool{}
	for _, ep := range eps {
		seen[ep.Name] = true
	}
	for _, x := range a.cfg.Extensions {
		for _, ep := range x.AdminEndpoints() {
			if !endpointName.MatchString(ep.Name) || ep.Handler == nil {
				return fmt.Errorf("admin: extension endpoint %q: want <group>.<op> ([a-z0-9-]) and a handler", ep.Name)
			}
			if seen[ep.Name] {
				return fmt.Errorf("admin: extension endpoint %q is already registered", ep.Name)
			}
			seen[ep.Name] = true
			eps = append(eps, ep)
		}
	}
	svc, err := micro.AddService(a.cfg.Conn, micro.Config{
		Name:        bus.AdminService,
		Version:     serviceVersion(a.cfg.Version),
		Description: "syncnode admin API: node, partitions, checkpoints, segments, leases, reactions",
		Metadata:    map[string]string{"node": a.cfg.Node, "version": a.cfg.Version, "storage": a.cfg.Storage},
		QueueGroup:  bus.AdminQueueGroup,
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			a.log.Warn("admin service error", "subject", e.Subject, "err", e.Description)
		},
	})
	if err != nil {
		return fmt.Errorf("admin: add service: %w", err)
	}
	for _, ep := range eps {
		opts := []micro.EndpointOpt{micro.WithEndpointSubject(bus.AdminSubject(ep.Name))}
		if ep.EveryNode {
			opts = append(opts, micro.WithEndpointQueueGroupDisabled())
		}
		if err := svc.AddEndpoint(strings.ReplaceAll(ep.Name, ".", "-"), a.handler(ep), opts...); err != nil {
			_ = svc.Stop()
			return fmt.Errorf("admin: add endpoint %s: %w", ep.Name, err)
		}
	}
	// The subscriptions are sent, not yet known to the server: a PING
	// round trip makes Start return only once a request finds a
	// responder (without it, a client right after start can get "no
	// responders").
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.cfg.Conn.FlushWithContext(fctx); err != nil {
		_ = svc.Stop()
		return fmt.Errorf("admin: flush subscriptions: %w", err)
	}
	a.mu.Lock()
	a.svc = svc
	a.mu.Unlock()
	return nil
}

// Stop drains the service's subscriptions and cancels the requests in
// flight. It is idempotent.
func (a *Admin) Stop(context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.svc == nil || a.stopped {
		return nil
	}
	a.stopped = true
	err := a.svc.Stop()
	a.cancel()
	if err != nil {
		return fmt.Errorf("admin: stop: %w", err)
	}
	return nil
}

// handler answers one request: the operation's value as JSON, or an
// error reply (Nats-Service-Error headers and an {"error": …} body).
func (a *Admin) handler(ep Endpoint) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		ctx, cancel := context.WithTimeout(a.base, a.cfg.Timeout)
		defer cancel()
		resp, err := ep.Handler(ctx, req.Data())
		if err == nil {
			var b []byte
			if b, err = json.Marshal(resp); err == nil {
				if rerr := req.Respond(b); rerr != nil {
					a.log.Debug("admin: respond", "endpoint", ep.Name, "err", rerr)
				}
				return
			}
		}
		e := toError(ep.Name, err)
		if e.Code == CodeInternal {
			a.log.Error("admin request failed", "endpoint", ep.Name, "err", err)
		}
		if rerr := req.Error(statusHeader(e.Code), string(e.Code)+": "+e.Message, mustJSON(errorBody{Error: e})); rerr != nil {
			a.log.Debug("admin: respond", "endpoint", ep.Name, "err", rerr)
		}
	})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own types are marshalled
	}
	return b
}

// serviceVersion is v as the SemVer micro requires: v without a leading
// "v" when that is SemVer, else 0.0.0-<v> with the bytes SemVer does not
// allow in a pre-release dropped ("devel" → "0.0.0-devel"), else 0.0.0.
func serviceVersion(v string) string {
	v = strings.TrimPrefix(v, "v")
	if semver.MatchString(v) {
		return v
	}
	pre := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return -1
	}, v)
	if out := "0.0.0-" + pre; pre != "" && semver.MatchString(out) {
		return out
	}
	return "0.0.0"
}

// semver is the SemVer 2.0 pattern micro validates versions with.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)
