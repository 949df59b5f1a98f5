package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/internal/lifecycle"
)

// The NATS binding. Requests: a caller sends the same encoded request
// object as over HTTP to Names.OperationRequests() with
// "Authorization: Bearer <token>" in the message header; the node
// authenticates the token exactly as HTTP does (a JWT, or the token hook)
// and replies with the encoded response. A request without a valid token
// is answered with an encoded error sync.auth_required and runs nothing:
// being able to publish on the subject grants nothing by itself.
//
// NATS commands: for a command registered with nats, the node sends to
// Names.OperationCommand(id), under the partition lock, an encoded object
//
//	{revision: 1, kind: "commandCall", operationId, requestId, partition,
//	 actorId, clientId, params, rows: [{table, rowId, row: object|null}],
//	 readSubject}
//
// where rows are the command's declared reads (rows the caller's scopes
// do not grant are null). Until it replies, the handler may send requests
// to readSubject (bus.RequestServing; at most MaxCommandReads), each
// answered from inside the command's transaction with the caller's
// authorization (commandRead): a registered query, or a row by key. The
// node then commits what the handler replies,
//
//	{revision: 1, kind: "mutations", mutations: [{op: "upsert"|"delete",
//	 table, rowId?, row?: object}]}
//
// or fails the request (operation.execution_failed, nothing stored) on an
// {kind: "error", message} reply, no reply within the timeout, or
// anything else.

// NATSConfig configures the request binding.
type NATSConfig struct {
	Service *Service
	Conn    *nats.Conn
	Names   bus.Names
	// Auth authenticates a bearer token (the Authorization header's
	// value, "Bearer <token>").
	Auth func(authorization string) (engine.Identity, error)
	// Concurrency bounds requests run at once by this node (default 64).
	Concurrency int
	Logger      *slog.Logger
}

// NATSBinding answers operation requests on the bus.
type NATSBinding struct {
	cfg   NATSConfig
	sub   *nats.Subscription
	sem   chan struct{}
	tasks lifecycle.Tasks // the requests in flight
	once  sync.Once
}

// NewNATSBinding validates cfg.
func NewNATSBinding(cfg NATSConfig) (*NATSBinding, error) {
	if cfg.Service == nil || cfg.Conn == nil || cfg.Auth == nil {
		return nil, errors.New("operations NATS binding: Service, Conn and Auth are required")
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 64
	}
	if cfg.Concurrency < 0 {
		return nil, errors.New("operations NATS binding: Concurrency must not be negative")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &NATSBinding{cfg: cfg, sem: make(chan struct{}, cfg.Concurrency)}, nil
}

// Start subscribes in the operations queue group.
func (b *NATSBinding) Start(context.Context) error {
	sub, err := b.cfg.Conn.QueueSubscribe(b.cfg.Names.OperationRequests(), bus.OperationsQueueGroup, func(m *nats.Msg) {
		b.sem <- struct{}{}
		started := b.tasks.Go(func() {
			defer func() { <-b.sem }()
			b.serve(m)
		})
		if !started {
			<-b.sem // stopping: the requester's timeout answers it
		}
	})
	if err != nil {
		return fmt.Errorf("operations NATS binding: %w", err)
	}
	b.sub = sub
	return nil
}

// Stop unsubscribes and waits for running requests, within ctx.
func (b *NATSBinding) Stop(ctx context.Context) error {
	var err error
	b.once.Do(func() {
		if b.sub != nil {
			err = b.sub.Unsubscribe()
		}
		err = errors.Join(err, b.tasks.Wait(ctx))
	})
	return err
}

func (b *NATSBinding) serve(m *nats.Msg) {
	var (
		resp Object
		id   engine.Identity
		err  = errors.New("no Authorization header")
	)
	if h := m.Header.Get("Authorization"); h != "" {
		id, err = b.cfg.Auth(h)
	}
	switch {
	case err != nil:
		resp = ErrorObject(&Error{Code: "sync.auth_required", Message: "authentication required: send Authorization: Bearer <token>"})
	default:
		req, err := DecodeRequest(m.Data)
		if err != nil {
			resp = ErrorObject(toError(err))
		} else {
			resp = b.cfg.Service.Do(context.Background(), id, req)
		}
	}
	out, err := Encode(resp)
	if err != nil {
		out, _ = Encode(ErrorObject(errorf(CodeExecutionFailed, "the response could not be encoded")))
	}
	if err := m.Respond(out); err != nil {
		b.cfg.Logger.Debug("operations NATS reply", "err", err)
	}
}

// natsCommand asks the command's handler on the bus for its mutations.
func (s *Service) natsCommand(ctx context.Context, c *command, call CommandCall) ([]Mutation, error) {
	if s.cfg.Conn == nil {
		return nil, errors.New("no NATS connection for a NATS command")
	}
	subject, err := s.cfg.Names.OperationCommand(c.ID)
	if err != nil {
		return nil, err
	}
	rows := make([]any, 0, len(c.Reads))
	for _, rd := range c.Reads {
		p, _ := call.Params.(Object)
		v, _ := p.Get(rd.RowIDParam)
		rowID, ok := v.(string)
		if !ok {
			return nil, errorf(CodeInvalidRequest, "params.%s must be a row id string", rd.RowIDParam)
		}
		row, found, err := call.Rows.GetRow(ctx, rd.Table, rowID)
		if err != nil {
			return nil, err
		}
		var rv any
		if found {
			rv = s.rowObject(rd.Table, row)
		}
		rows = append(rows, Object{{"table", rd.Table}, {"rowId", rowID}, {"row", rv}})
	}
	readSubject := s.cfg.Names.OperationRead(bus.ReadToken())
	body, err := Encode(Object{{"revision", int64(Revision)}, {"kind", "commandCall"}, {"operationId", call.OperationID},
		{"requestId", call.RequestID}, {"partition", call.Identity.Partition}, {"actorId", call.Identity.ActorID},
		{"clientId", call.ClientID}, {"params", call.Params}, {"rows", rows}, {"readSubject", readSubject}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	reads := 0
	reply, err := bus.RequestServing(ctx, s.cfg.Conn, subject, readSubject, body, func(data []byte) []byte {
		reads++
		var out Object
		if reads > MaxCommandReads {
			out = ErrorObject(errorf(CodeInvalidRequest, "a command call reads at most %d times", MaxCommandReads))
		} else {
			out = s.commandRead(ctx, call, data)
		}
		b, err := Encode(out)
		if err != nil {
			b, _ = Encode(ErrorObject(errorf(CodeExecutionFailed, "the read's answer could not be encoded")))
		}
		return b
	})
	if err != nil {
		return nil, fmt.Errorf("NATS command %s: %w", c.ID, err)
	}
	return decodeMutations(reply.Data)
}

// MaxCommandReads bounds the reads one NATS command call may send to its
// read subject: the partition's writes wait while the handler reads.
const MaxCommandReads = 1000

// commandRead answers one read a NATS command handler sent to its call's
// read subject, inside the command's transaction and with the caller's
// authorization: {kind: "query", operationId, params} runs a registered
// query as CommandCall.Query does and answers the query's success object;
// {kind: "getRow", table, rowId} answers {kind: "row", table, rowId,
// row: object|null} (null when absent or not granted to the caller).
// Anything else, and every refusal, is an error object.
func (s *Service) commandRead(ctx context.Context, call CommandCall, data []byte) Object {
	v, err := Decode(data)
	if err != nil {
		return ErrorObject(errorf(CodeInvalidRequest, "%v", err))
	}
	o, _ := v.(Object)
	str := func(k string) string { x, _ := o.Get(k); v, _ := x.(string); return v }
	switch kind := str("kind"); kind {
	case "query":
		id := str("operationId")
		p, _ := o.Get("params")
		params, ok := p.([]any)
		if !ok {
			return ErrorObject(errorf(CodeInvalidRequest, "a query read's params are an array"))
		}
		res, err := call.Query(ctx, id, params...)
		if err != nil {
			return ErrorObject(toError(err))
		}
		return res.object(id)
	case "getRow":
		table, rowID := str("table"), str("rowId")
		if _, ok := s.cfg.Schema.Table(table); !ok || rowID == "" {
			return ErrorObject(errorf(CodeInvalidRequest, "a getRow read names a table of the schema and a rowId"))
		}
		row, found, err := call.Rows.GetRow(ctx, table, rowID)
		if err != nil {
			return ErrorObject(toError(err))
		}
		var rv any
		if found {
			rv = s.rowObject(table, row)
		}
		return Object{{"revision", int64(Revision)}, {"kind", "row"}, {"table", table}, {"rowId", rowID}, {"row", rv}}
	default:
		return ErrorObject(errorf(CodeInvalidRequest, "a read is of kind query or getRow, not %q", kind))
	}
}

// rowObject renders a row in the table's column order.
func (s *Service) rowObject(table string, row engine.Row) Object {
	t, _ := s.cfg.Schema.Table(table)
	o := make(Object, 0, len(t.Columns))
	for _, c := range t.Columns {
		v := row[c.Name]
		if raw, ok := v.(json.RawMessage); ok {
			v = string(raw)
		}
		o = append(o, Field{c.Name, v})
	}
	return o
}

// decodeMutations reads a NATS command handler's reply.
func decodeMutations(b []byte) ([]Mutation, error) {
	v, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("command handler reply: %w", err)
	}
	o, _ := v.(Object)
	switch kind, _ := o.Get("kind"); kind {
	case "error":
		msg, _ := o.Get("message")
		return nil, fmt.Errorf("command handler: %v", msg)
	case "mutations":
	default:
		return nil, fmt.Errorf("command handler reply of kind %v", kind)
	}
	list, _ := o.Get("mutations")
	arr, ok := list.([]any)
	if !ok {
		return nil, errors.New("command handler reply: mutations is not an array")
	}
	out := make([]Mutation, 0, len(arr))
	for i, it := range arr {
		mo, ok := it.(Object)
		if !ok {
			return nil, fmt.Errorf("mutation %d is not an object", i)
		}
		var m Mutation
		op, _ := mo.Get("op")
		table, _ := mo.Get("table")
		rowID, _ := mo.Get("rowId")
		m.Op, _ = op.(string)
		m.Table, _ = table.(string)
		m.RowID, _ = rowID.(string)
		if r, ok := mo.Get("row"); ok && r != nil {
			ro, ok := r.(Object)
			if !ok {
				return nil, fmt.Errorf("mutation %d: row is not an object", i)
			}
			m.Row = make(map[string]any, len(ro))
			for _, f := range ro {
				m.Row[f.Key] = f.Value
			}
		}
		out = append(out, m)
	}
	return out, nil
}
