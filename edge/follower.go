package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/ssp2"
)

// Across a hub cluster only the edge's lease holder moves a replica; the
// other hub nodes (followers) serve it from SQL. Whether the replica may
// be served at a position is the holder's knowledge — a home migration
// it learned of from a page, a rebuild under way, a failed apply — and a
// follower's own status pings learn of a migration only up to one
// PingInterval after the holder applied its first batch. So a follower
// serves a replica only at a position the holder vouched for: after
// every move, the holder publishes a note (position, and the refusal
// that holds there, if any) on bus.Names.EdgeReplicaSubject, every hub
// node subscribes, and a follower whose SQL shows a position no note
// covers asks the holder, then waits for its note, for at most
// RequestTimeout, and refuses retryably (replica_unconfirmed) past it.
//
// This fails closed without a membership list: the holder needs no
// acks, because a batch it applies moves the replica to a position no
// servable note covers until the holder decides it is servable. A
// holder's refusal reaches the followers within the note's delivery
// (microseconds on one NATS cluster), not a PingInterval. What remains
// is the pull admitted just before a refused position became visible:
// it may read it, exactly as at the holder (ARCHITECTURE.md).

// replicaNote is the holder's word on one replica: at LogEpoch@Seq it is
// refused with Reason (and Message), or servable when Reason is empty.
type replicaNote struct {
	Partition string `json:"partition"`
	LogEpoch  string `json:"logEpoch"`
	Seq       int64  `json:"seq"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
	// Unloaded answers an ask about a replica the holder has not read
	// since it took the lease: it applies nothing to it, so what SQL
	// held before the ask stays as it is until the holder's next note.
	Unloaded bool `json:"unloaded,omitempty"`
}

// replicaAsk asks the holder for its note on a partition.
type replicaAsk struct {
	Partition string `json:"partition"`
}

// subscribeNotes subscribes the link to the notes and asks of its edge.
func (h *Hub) subscribeNotes(l *link) error {
	sub, err := h.cfg.Conn.Subscribe(h.cfg.Names.EdgeReplicaSubject(l.edge), func(m *nats.Msg) { h.onNote(l, m) })
	if err != nil {
		return fmt.Errorf("edge: subscribe to the replica notes of %s: %w", l.edge, err)
	}
	l.notesSub = sub
	return nil
}

// onNote handles a note (a follower keeps it) or an ask (the holder
// answers it; the other nodes stay silent).
func (h *Hub) onNote(l *link, m *nats.Msg) {
	l.mu.Lock()
	holder := l.holder
	l.mu.Unlock()
	if m.Reply != "" {
		var a replicaAsk
		if !holder || json.Unmarshal(m.Data, &a) != nil {
			return
		}
		b, _ := json.Marshal(h.noteOf(l, a.Partition))
		_ = m.Respond(b)
		return
	}
	var n replicaNote
	if holder || json.Unmarshal(m.Data, &n) != nil || n.Unloaded {
		return
	}
	l.noteLocked(func() { l.notes[n.Partition] = n })
}

// noteLocked runs fn under the link's lock and wakes the followers'
// waits.
func (l *link) noteLocked(fn func()) {
	l.mu.Lock()
	fn()
	close(l.noted)
	l.noted = make(chan struct{})
	l.mu.Unlock()
}

// noteOf is this node's (the holder's) note on a partition, read in one
// go under the link's lock: the replica's position and the refusal that
// holds there.
func (h *Hub) noteOf(l *link, partition string) replicaNote {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.parts[partition]
	n := replicaNote{Partition: partition}
	if s != nil {
		n.Reason, n.Message = l.refusalLocked(s)
	}
	if s == nil || !s.loaded || s.epoch == "" {
		n.Unloaded = true
		return n
	}
	n.LogEpoch, n.Seq = s.epoch, s.applied
	return n
}

// announce publishes the holder's note on a partition it replicates.
func (h *Hub) announce(l *link, partition string) {
	n := h.noteOf(l, partition)
	if n.Unloaded {
		return
	}
	b, _ := json.Marshal(n)
	if err := h.cfg.Conn.Publish(h.cfg.Names.EdgeReplicaSubject(l.edge), b); err != nil {
		h.log.Debug("edge: publish a replica note", "edge", l.edge, "partition", partition, "err", err)
	}
}

// followerReady is Ready at a hub node that does not replicate the edge:
// the replica, as SQL holds it, must be at a position the holder vouched
// for (see above).
func (h *Hub) followerReady(ctx context.Context, l *link, partition string) error {
	deadline := time.NewTimer(h.cfg.RequestTimeout)
	defer deadline.Stop()
	type position struct {
		epoch string
		seq   int64
	}
	var seen []position // every position this call read
	asked := false
	for {
		p, err := h.cfg.Store.PartitionGet(ctx, partition)
		if err != nil {
			if ssp2.CodeOf(err) == ssp2.CodeStoragePartitionUnregistered {
				return notReady(l.edge, "replica_not_ready", "the hub holds no replica of this partition yet; retry")
			}
			return err
		}
		if isPlaceholder(p.LogEpoch) {
			return notReady(l.edge, "replica_rebuilding", "the hub is rebuilding its replica of this partition from the edge's rows; retry")
		}
		if !slices.Contains(seen, position{p.LogEpoch, p.MaxCommitSeq}) {
			seen = append(seen, position{p.LogEpoch, p.MaxCommitSeq})
		}
		l.mu.Lock()
		n, ok := l.notes[partition]
		wake := l.noted
		l.mu.Unlock()
		if ok && n.LogEpoch == p.LogEpoch {
			if n.Reason != "" && n.Seq <= p.MaxCommitSeq {
				// Refused there, and nothing the holder said since
				// lifted it: refusing is always safe.
				return notReady(l.edge, n.Reason, n.Message)
			}
			if n.Reason == "" && slices.Contains(seen, position{n.LogEpoch, n.Seq}) {
				return nil
			}
		}
		if !asked {
			asked = true
			r, err := h.askHolder(ctx, l, partition)
			if err == nil {
				if r.Unloaded {
					// The holder applies nothing to this replica: what
					// was read above stands, with the holder's refusal.
					if r.Reason != "" {
						return notReady(l.edge, r.Reason, r.Message)
					}
					return nil
				}
				l.noteLocked(func() { l.notes[partition] = r })
				continue
			}
		}
		h.metrics.FollowerWaits.Add(1)
		select {
		case <-wake:
		case <-deadline.C:
			h.metrics.FollowerUnconfirmed.Add(1)
			return notReady(l.edge, "replica_unconfirmed", "the hub node replicating this partition has not confirmed the replica's position yet; retry")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// askHolder asks the holder for its note on partition, within
// RequestTimeout.
func (h *Hub) askHolder(ctx context.Context, l *link, partition string) (replicaNote, error) {
	b, _ := json.Marshal(replicaAsk{Partition: partition})
	rctx, cancel := context.WithTimeout(ctx, h.cfg.RequestTimeout)
	defer cancel()
	m, err := h.cfg.Conn.RequestWithContext(rctx, h.cfg.Names.EdgeReplicaSubject(l.edge), b)
	if err != nil {
		return replicaNote{}, err
	}
	var n replicaNote
	if err := json.Unmarshal(m.Data, &n); err != nil {
		return replicaNote{}, err
	}
	return n, nil
}
