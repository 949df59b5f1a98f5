package bus

import (
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// The two live subscribers to commit events, Tail and Watcher, are core
// NATS subscriptions: the client drops a message when the subscription's
// pending queue is full (a slow consumer), and each must then resync from
// SQL. What they share of that is here: subscribing with pending limits,
// and noticing a drop.

// subscribeCommits subscribes handler on nc to every commit event of
// names (sync.*.commit.*) with the given pending limits. The subscription
// is live at the server when it returns (the flush's PONG follows the
// SUB); on an error there is none.
func subscribeCommits(nc *nats.Conn, names Names, handler nats.MsgHandler, pendingMsgs, pendingBytes int) (*nats.Subscription, error) {
	sub, err := nc.Subscribe(names.CommitSubjects(), handler)
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(pendingMsgs, pendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return sub, nil
}

// dropCount is the Subscription.Dropped count last acted on. The count
// only grows, and only while the queue is full.
type dropCount struct{ seen atomic.Int64 }

// moved reports whether sub's count is not the one last acted on. It is
// cheap, for a message handler deciding whether to wake its checker.
func (d *dropCount) moved(sub *nats.Subscription) bool {
	n, _ := sub.Dropped()
	return int64(n) != d.seen.Load()
}

// take records sub's count as acted on and returns how many messages it
// dropped since the last take: 0 when none, or when the count cannot be
// read (the subscription is closed).
func (d *dropCount) take(sub *nats.Subscription) int64 {
	n, err := sub.Dropped()
	if err != nil {
		return 0
	}
	return int64(n) - d.seen.Swap(int64(n))
}
