package edge

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/syncnode/syncnode/storage"
)

// errLeaseLost stops a catch-up when this node lost the edge's
// replication lease mid-way; the page applied last stays (the next
// holder skips what the replica has).
var errLeaseLost = errors.New("edge replication lease lost")

// errFenced stops a replica write of a hub node that another took the
// replica over from: the epoch under the partition lock (a rebuild's
// placeholder is its fencing token) or the replica's position is not the
// one this node last saw. The replica is reloaded from SQL on the next
// poll; nothing was written.
var errFenced = errors.New("edge replica taken over by another hub node")

// leaseHeld is errLeaseLost once lease (a held lock's Lost) is closed.
func leaseHeld(lease <-chan struct{}) error {
	select {
	case <-lease:
		return errLeaseLost
	default:
		return nil
	}
}

// LeaseName is the store lock (storage.Locker) a hub node holds while it
// replicates edge: of the hub nodes on one database only the holder runs
// the edge's replication loop.
func LeaseName(edge string) string { return "syncnode.edge-replica:" + edge }

// leaseRetry is the pause after a failed attempt to take the lease (the
// database unreachable); waiting for a held lease is the database's.
const leaseRetry = time.Second

// lease is one link loop's hold on its edge's replication. On a store
// several hub nodes share (storage.Locker: PostgreSQL) it is the store's
// named lock, waited for in the background and taken over the moment its
// holder's database session ends; on a store only this node opens it is
// always held.
//
// Why a database lock and not a JetStream KV lease: the replica's writes
// go to that database, so its session is the right fence — a holder cut
// off from the database can apply nothing anyway, and one whose process
// died releases at once (no TTL to wait out). A KV lease would also need
// a quorum of the hub's JetStream, which a two-node hub cluster loses with
// either node. Duplicate applies are impossible either way: every page
// is applied under the partition's write lock, skipping commits the
// replica has.
type lease struct {
	h    *Hub
	l    *link
	stop context.CancelFunc
	done chan struct{}
	ch   chan struct{} // a token on every change of hands

	mu   sync.Mutex
	lost <-chan struct{} // the held lock's Lost; nil while not held
}

// always is the Lost of a lease that cannot be lost.
var always = make(chan struct{})

func (h *Hub) newLease(l *link) *lease {
	ls := &lease{h: h, l: l, done: make(chan struct{}), ch: make(chan struct{}, 1)}
	locker, ok := h.cfg.Store.(storage.Locker)
	if !ok {
		ls.set(always)
		close(ls.done)
		ls.stop = func() {}
		return ls
	}
	ctx, cancel := context.WithCancel(h.ctx)
	ls.stop = cancel
	go ls.hold(ctx, locker)
	return ls
}

// hold takes the lock, keeps it until it is lost, and takes it again.
func (ls *lease) hold(ctx context.Context, locker storage.Locker) {
	defer close(ls.done)
	name := LeaseName(ls.l.edge)
	for ctx.Err() == nil {
		lk, err := locker.Lock(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			ls.h.log.Warn("edge: replication lease not taken; retrying", "edge", ls.l.edge, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(leaseRetry):
			}
			continue
		}
		ls.h.log.Info("edge: replicating this edge (lease taken)", "edge", ls.l.edge)
		ls.h.metrics.LeaseTaken.Add(1)
		ls.set(lk.Lost())
		select {
		case <-lk.Lost():
			ls.h.log.Warn("edge: replication lease lost", "edge", ls.l.edge)
		case <-ctx.Done():
		}
		ls.set(nil)
		if err := lk.Release(context.WithoutCancel(ctx)); err != nil {
			ls.h.log.Debug("edge: release replication lease", "edge", ls.l.edge, "err", err)
		}
	}
}

func (ls *lease) set(lost <-chan struct{}) {
	ls.mu.Lock()
	ls.lost = lost
	ls.mu.Unlock()
	ls.l.mu.Lock()
	ls.l.holder = lost != nil
	ls.l.mu.Unlock()
	select {
	case ls.ch <- struct{}{}:
	default:
	}
}

// holding returns the held lock's Lost channel, nil while another node
// holds the lease.
func (ls *lease) holding() <-chan struct{} {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.lost
}

// changed delivers a token when the lease changed hands.
func (ls *lease) changed() <-chan struct{} { return ls.ch }

// release gives the lease up (the loop ends) and waits for it.
func (ls *lease) release() {
	ls.stop()
	<-ls.done
}
