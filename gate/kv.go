package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/storage"
)

// Token is a partition's serve-gate token in KV (gate.<partition>): what
// every node needs to notice that the partition's gate changed. It is
// rebuilt from SQL at any time.
type Token struct {
	// Partition is the raw id (the key's token may be a hash).
	Partition      string   `json:"partition"`
	SchemaVersion  int32    `json:"schemaVersion"`
	SchemaRevision int64    `json:"schemaRevision"`
	LogEpoch       string   `json:"logEpoch"`
	Revision       int64    `json:"revision"`
	Pending        []string `json:"pending"`
}

// SchemaToken is the node-wide token (schema.current).
type SchemaToken struct {
	SchemaVersion  int32 `json:"schemaVersion"`
	SchemaRevision int64 `json:"schemaRevision"`
}

// TokenOf builds a partition's token from a gate read.
func TokenOf(partition string, st storage.GateState) Token {
	t := Token{Partition: partition, SchemaVersion: st.SchemaVersion, SchemaRevision: st.SchemaRevision,
		LogEpoch: st.LogEpoch, Revision: st.Revision, Pending: []string{}}
	for _, p := range st.Pending {
		t.Pending = append(t.Pending, p.Name)
	}
	return t
}

// Equal compares two tokens field by field.
func (t Token) Equal(o Token) bool {
	return t.Partition == o.Partition && t.SchemaVersion == o.SchemaVersion && t.SchemaRevision == o.SchemaRevision &&
		t.LogEpoch == o.LogEpoch && t.Revision == o.Revision && slices.Equal(t.Pending, o.Pending)
}

// ErrNoBus is returned by calls that need KV when the gate has no NATS
// connection or has not reached its bucket yet.
var ErrNoBus = errors.New("gate: no JetStream KV bucket")

// Start creates (or binds) the KV bucket, publishes the schema token,
// starts the watcher and the periodic resync. JetStream being slow or
// absent does not fail Start: the gate keeps gating on SQL alone and
// keeps retrying in the background. Without a NATS connection Start does
// nothing.
func (g *Gate) Start(ctx context.Context) error {
	if !g.started.CompareAndSwap(false, true) {
		return errors.New("gate: already started")
	}
	if g.cfg.JetStream == nil {
		close(g.done)
		return nil
	}
	go g.run(context.WithoutCancel(ctx))
	return nil
}

// Bind binds the KV bucket without watching it, for short-lived
// processes that write tokens and serve nothing (the CLI). Start binds by
// itself.
func (g *Gate) Bind(ctx context.Context) error {
	if g.cfg.JetStream == nil {
		return ErrNoBus
	}
	kv, err := g.bind(ctx)
	if err != nil {
		return err
	}
	g.kv.Store(&kv)
	return nil
}

// Stop stops the watcher and the resync; it is idempotent.
func (g *Gate) Stop(ctx context.Context) error {
	g.once.Do(func() { close(g.stop) })
	if !g.started.Load() {
		return nil
	}
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gate stop: %w", ctx.Err())
	}
}

// run owns the bucket binding, the watcher and the resync until Stop.
func (g *Gate) run(ctx context.Context) {
	defer close(g.done)
	defer g.live.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-g.stop
		cancel()
	}()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		kv, err := g.bind(ctx)
		if err != nil {
			g.log.Warn("serve-gate bucket unavailable; gating on SQL alone", "err", err)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		g.kv.Store(&kv)
		if err := g.PublishSchema(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("publish schema token", "err", err)
		}
		err = g.watch(ctx, kv)
		if ctx.Err() != nil {
			return
		}
		g.log.Warn("serve-gate watcher stopped; gating on SQL alone until it is back", "err", err)
		if !sleep(ctx, backoff) {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// attempt bounds one JetStream API call.
func (g *Gate) attempt(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.cfg.AttemptTimeout)
}

func (g *Gate) bind(ctx context.Context) (jetstream.KeyValue, error) {
	actx, cancel := g.attempt(ctx)
	defer cancel()
	kv, err := g.cfg.JetStream.KeyValue(actx, g.cfg.Names.GateBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = g.cfg.JetStream.CreateKeyValue(actx, g.cfg.Names.GateBucketConfig(g.cfg.Replicas))
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = g.cfg.JetStream.KeyValue(actx, g.cfg.Names.GateBucket())
		}
	}
	if err == nil {
		err = bus.EnsureReplicas(actx, g.cfg.JetStream, bus.KVStream(g.cfg.Names.GateBucket()), g.cfg.Replicas)
	}
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", g.cfg.Names.GateBucket(), err)
	}
	return kv, nil
}

// watch consumes the bucket's updates until ctx ends, the watcher fails
// or the connection reconnects (after which the view is rebuilt from a
// fresh watcher: updates may have been missed).
func (g *Gate) watch(ctx context.Context, kv jetstream.KeyValue) error {
	nc := g.cfg.Conn
	reconnects := nc.Stats().Reconnects
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", g.cfg.Names.GateBucket(), err)
	}
	defer func() { _ = w.Stop() }()
	// Anything read before this watcher is suspect: invalidate the view.
	g.viewGen.Add(1)
	tick := time.NewTicker(g.cfg.WatchCheck)
	defer tick.Stop()
	var resync <-chan time.Time
	if g.cfg.ResyncInterval > 0 {
		rt := time.NewTicker(g.cfg.ResyncInterval)
		defer rt.Stop()
		resync = rt.C
	}
	defer g.live.Store(false)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if !nc.IsConnected() || nc.Stats().Reconnects != reconnects {
				g.live.Store(false)
				g.viewGen.Add(1)
				if nc.Stats().Reconnects != reconnects {
					return errors.New("connection reconnected")
				}
			}
		case <-resync:
			g.reconcileAsync(ctx)
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed")
			}
			if e == nil {
				// The initial values are in: the view is current.
				g.live.Store(true)
				g.reconcileAsync(ctx)
				continue
			}
			g.onUpdate(ctx, e)
		}
	}
}

// onUpdate applies one watched change: invalidate, re-read SQL, notify.
func (g *Gate) onUpdate(ctx context.Context, e jetstream.KeyValueEntry) {
	g.metrics.WatchUpdates.Add(1)
	// Counted once the re-read's state is in the view: while the counts
	// differ, a re-read is in flight and may land a state newer than the
	// change that started it.
	defer g.metrics.WatchApplied.Add(1)
	live := g.live.Load()
	if e.Key() == bus.GateSchemaKey {
		g.viewGen.Add(1)
		if live && g.cfg.OnChange != nil {
			g.cfg.OnChange("")
		}
		return
	}
	tok, ok := bus.ParseGateKey(e.Key())
	if !ok {
		return
	}
	var t Token
	put := e.Operation() == jetstream.KeyValuePut && json.Unmarshal(e.Value(), &t) == nil && t.Partition != ""
	g.mu.Lock()
	v := g.view[tok]
	if v == nil {
		v = &viewEntry{}
		g.view[tok] = v
	}
	v.gen++
	v.state = nil
	if put {
		v.partition = t.Partition
	}
	gen := v.gen
	g.mu.Unlock()
	if !live || !put {
		return
	}
	// Re-read SQL now, so the next request is admitted without a read
	// and the hook sees the new state.
	vg := g.viewGen.Load()
	st, err := g.cfg.Store.GateRead(ctx, t.Partition, g.build)
	if err == nil {
		g.mu.Lock()
		if v := g.view[tok]; v != nil && v.gen == gen && g.viewGen.Load() == vg {
			v.state, v.viewGen = &st, vg
		}
		g.mu.Unlock()
	}
	if g.cfg.OnChange != nil {
		g.cfg.OnChange(t.Partition)
	}
}

// Publish rebuilds partition's token from SQL and writes it to KV by
// compare-and-set on the key's revision: the KV entry is read first and
// SQL after it, so the token written is never older than the one it
// replaces; an equal token is not written.
func (g *Gate) Publish(ctx context.Context, partition string) error {
	kvp := g.kv.Load()
	if kvp == nil {
		return ErrNoBus
	}
	kv := *kvp
	p, err := bus.NewPartition(partition)
	if err != nil {
		return fmt.Errorf("publish token: %w", err)
	}
	key := bus.GateKey(p)
	for range 8 {
		cur, rev, err := g.getToken(ctx, kv, key)
		if err != nil {
			return g.tokenErr(err)
		}
		st, err := g.cfg.Store.GateRead(ctx, partition, g.build)
		if err != nil {
			return fmt.Errorf("publish token: %w", err)
		}
		if st.SchemaVersion != g.build && st.HasMarker {
			// Tokens list the pending checkpoints of the stored version,
			// whatever build writes them.
			if st, err = g.cfg.Store.GateRead(ctx, partition, st.SchemaVersion); err != nil {
				return fmt.Errorf("publish token: %w", err)
			}
		}
		want := TokenOf(partition, st)
		if cur != nil && cur.Equal(want) {
			return nil
		}
		data, _ := json.Marshal(want)
		done, err := g.put(ctx, kv, key, data, rev)
		if err != nil {
			return g.tokenErr(err)
		}
		if done {
			return nil
		}
	}
	return g.tokenErr(errors.New("too many concurrent writers"))
}

func (g *Gate) tokenErr(err error) error {
	g.metrics.TokenErrors.Add(1)
	return fmt.Errorf("publish token: %w", err)
}

// getToken reads a token and its revision (0 when absent).
func (g *Gate) getToken(ctx context.Context, kv jetstream.KeyValue, key string) (*Token, uint64, error) {
	actx, cancel := g.attempt(ctx)
	defer cancel()
	e, err := kv.Get(actx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var t Token
	if json.Unmarshal(e.Value(), &t) != nil {
		return nil, e.Revision(), nil // unreadable: overwrite
	}
	return &t, e.Revision(), nil
}

// put writes data at key if the key is still at rev (0: absent); done is
// false on a lost race.
func (g *Gate) put(ctx context.Context, kv jetstream.KeyValue, key string, data []byte, rev uint64) (done bool, err error) {
	actx, cancel := g.attempt(ctx)
	defer cancel()
	if rev == 0 {
		_, err = kv.Create(actx, key, data)
	} else {
		_, err = kv.Update(actx, key, data, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		g.metrics.TokenConflict.Add(1)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	g.metrics.TokenWrites.Add(1)
	return true, nil
}

// PublishSchema rewrites the node-wide schema token from SQL, like
// Publish, and announces schema_migrated when the stored version moved
// past the one in KV.
func (g *Gate) PublishSchema(ctx context.Context) error {
	kvp := g.kv.Load()
	if kvp == nil {
		return ErrNoBus
	}
	kv := *kvp
	for range 8 {
		actx, cancel := g.attempt(ctx)
		e, err := kv.Get(actx, bus.GateSchemaKey)
		cancel()
		var (
			cur *SchemaToken
			rev uint64
		)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return g.tokenErr(err)
		default:
			rev = e.Revision()
			var t SchemaToken
			if json.Unmarshal(e.Value(), &t) == nil {
				cur = &t
			}
		}
		st, err := g.cfg.Store.GateRead(ctx, "", g.build)
		if err != nil {
			return fmt.Errorf("publish schema token: %w", err)
		}
		if !st.HasMarker {
			return nil
		}
		want := SchemaToken{SchemaVersion: st.SchemaVersion, SchemaRevision: st.SchemaRevision}
		if cur != nil && *cur == want {
			return nil
		}
		data, _ := json.Marshal(want)
		done, err := g.put(ctx, kv, bus.GateSchemaKey, data, rev)
		if err != nil {
			return g.tokenErr(err)
		}
		if done {
			if cur == nil || cur.SchemaVersion != want.SchemaVersion {
				prev := int32(0)
				if cur != nil {
					prev = cur.SchemaVersion
				}
				g.event(ctx, nil, bus.EventSchemaMigrated, "", map[string]any{
					"schemaVersion": want.SchemaVersion, "previousSchemaVersion": prev, "schemaRevision": want.SchemaRevision,
				})
			}
			return nil
		}
	}
	return g.tokenErr(errors.New("too many concurrent writers"))
}

// reconcileAsync runs Reconcile in the background, one at a time.
func (g *Gate) reconcileAsync(ctx context.Context) {
	if !g.reconcile.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer g.reconcile.Store(false)
		if err := g.Reconcile(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("serve-gate resync", "err", err)
		}
	}()
}

// Reconcile rebuilds tokens from SQL: the schema token, and the token of
// every partition whose gate ever moved — every token the bucket holds
// (as far as the watcher saw), every partition with checkpoints, every
// partition whose epoch was rotated. It repairs what a crashed writer or
// a writer without KV left behind. A partition whose gate never moved
// needs no token: a node reads it in SQL on first use.
func (g *Gate) Reconcile(ctx context.Context) error {
	if g.kv.Load() == nil {
		return ErrNoBus
	}
	defer g.metrics.Resyncs.Add(1)
	if err := g.PublishSchema(ctx); err != nil {
		return err
	}
	parts, err := g.cfg.Store.Partitions(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	var ids []string
	for _, p := range parts {
		if p.EpochRequired { // rotated at least once
			ids = append(ids, p.ID)
		}
	}
	if g.live.Load() {
		g.mu.RLock()
		for _, v := range g.view {
			if v.partition != "" {
				ids = append(ids, v.partition)
			}
		}
		g.mu.RUnlock()
	} else {
		held, err := g.heldPartitions(ctx)
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		ids = append(ids, held...)
	}
	cps, err := g.cfg.Store.Checkpoints(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	for _, c := range cps {
		ids = append(ids, c.Partition)
	}
	slices.Sort(ids)
	var errs []error
	for _, id := range slices.Compact(ids) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err := bus.Token(id); err != nil {
			continue // cannot be on the bus
		}
		if err := g.Publish(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// heldPartitions lists the partitions whose tokens the bucket holds, for
// a gate without a watcher (the CLI).
func (g *Gate) heldPartitions(ctx context.Context) ([]string, error) {
	kv := *g.kv.Load()
	lister, err := kv.ListKeys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = lister.Stop() }()
	var out []string
	for key := range lister.Keys() {
		if _, ok := bus.ParseGateKey(key); !ok {
			continue
		}
		if t, _, err := g.getToken(ctx, kv, key); err == nil && t != nil && t.Partition != "" {
			out = append(out, t.Partition)
		}
	}
	return out, nil
}

// event publishes a control event to the control stream, best effort: the
// transition it reports is already in SQL.
func (g *Gate) event(ctx context.Context, partition *string, name, subject string, data any) {
	js := g.cfg.JetStream
	if js == nil {
		return
	}
	ev := bus.ControlEvent{Event: name, Subject: subject, Time: g.cfg.Clock.Now(), Data: data}
	if partition != nil {
		p, err := bus.NewPartition(*partition)
		if err != nil {
			return
		}
		ev.Partition = &p
		if subject == "" {
			ev.Subject = p.Token()
		} else {
			ev.Subject = p.Token() + "/" + subject
		}
	}
	msg, err := bus.NewControlMsg(g.cfg.Names, g.cfg.Node, ev)
	if err == nil {
		actx, cancel := g.attempt(ctx)
		_, err = js.PublishMsg(actx, msg)
		cancel()
	}
	if err != nil {
		g.metrics.EventErrors.Add(1)
		g.log.Warn("control event not published", "event", name, "err", err)
		return
	}
	g.metrics.Events.Add(1)
}
