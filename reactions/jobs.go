package reactions

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/storage"
)

// job is one claimed reaction until its outcome is recorded.
type job struct {
	r      storage.Reaction
	lease  storage.ReactionLease
	cancel context.CancelFunc // a Go handler's context
	lost   bool               // a heartbeat found the lease gone (guarded by Runner.mu)
}

// runHandler runs a Go handler, its lease extended by the heartbeat while
// it runs and, after a success, until the completion is recorded (a
// completion queued behind a slow store must not let the lease lapse and
// the reaction run again elsewhere).
func (r *Runner) runHandler(j *job, h Handler) {
	defer r.jobs.Done()
	ctx, cancel := context.WithCancel(r.jobCtx)
	defer cancel()
	j.cancel = cancel
	r.mu.Lock()
	r.leases[j.lease.ReactionKey] = j
	r.mu.Unlock()
	err := call(ctx, h, j.r)
	r.mu.Lock()
	lost := j.lost
	if lost || err != nil {
		delete(r.leases, j.lease.ReactionKey)
	}
	r.mu.Unlock()
	switch {
	case lost:
		r.lose()
	case err == nil:
		r.acks <- j // complete stops the heartbeat
	case r.jobCtx.Err() != nil:
		// Stopping: leave the lease to expire; another runner retries.
		r.release(1)
	default:
		if !errors.As(err, new(*Failure)) {
			r.log.Warn("reactions: handler failed", "type", j.r.Type, "partition", j.r.Partition, "attempt", j.r.Attempts, "err", err)
		}
		r.fail(j, failureOf(err, r.now()))
	}
}

// call runs h, turning a panic into an error.
func call(ctx context.Context, h Handler, rx storage.Reaction) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = panicError{p}
		}
	}()
	return h(ctx, rx)
}

// dispatch sends the reaction to a NATS worker and records its reply. The
// request waits until just before the lease ends, so a missing reply is
// recorded while the lease is still this runner's.
func (r *Runner) dispatch(j *job) {
	defer r.jobs.Done()
	m, err := workMsg(r.cfg.Names, j.r)
	if err != nil { // the store's type check makes this unreachable
		r.fail(j, outcome{failure: storage.ReactionFailure{Code: CodeDispatchFailed, AtMs: r.now().UnixMilli()}, permanent: true})
		return
	}
	deadline := time.UnixMilli(j.r.LeaseExpiresAtMs).Add(-min(r.cfg.Lease/10, time.Second))
	ctx, cancel := context.WithTimeout(r.jobCtx, deadline.Sub(r.now()))
	defer cancel()
	reply, err := r.cfg.Conn.RequestMsgWithContext(ctx, m)
	now := r.now()
	switch {
	case err == nil:
		if completed, o := parseReply(reply.Data, now); completed {
			r.acks <- j
		} else {
			r.fail(j, o)
		}
	case r.jobCtx.Err() != nil:
		r.release(1) // stopping: the lease expires and another runner retries
	case errors.Is(err, nats.ErrNoResponders):
		r.fail(j, outcome{failure: storage.ReactionFailure{Code: CodeNoWorker, AtMs: now.UnixMilli()}})
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		r.fail(j, outcome{failure: storage.ReactionFailure{Code: CodeWorkerTimeout, AtMs: now.UnixMilli()}})
	default:
		r.log.Warn("reactions: worker request failed", "type", j.r.Type, "err", err)
		r.fail(j, outcome{failure: storage.ReactionFailure{Code: CodeDispatchFailed, AtMs: now.UnixMilli()}})
	}
}

// fail records a failed attempt: a retry after the backoff (or the
// worker's time), or a dead letter.
func (r *Runner) fail(j *job, o outcome) {
	defer r.release(1)
	now := time.UnixMilli(o.failure.AtMs)
	retryAt := now.Add(Backoff(r.cfg.InitialBackoff, r.cfg.MaxBackoff, j.r.Attempts))
	switch {
	case !o.retryAt.IsZero():
		retryAt = o.retryAt
		if retryAt.Before(now) {
			retryAt = now
		}
	case o.retryAfter > 0:
		retryAt = now.Add(o.retryAfter)
	}
	st, ok, err := r.cfg.Store.ReactionFail(context.WithoutCancel(r.jobCtx), storage.ReactionFailParams{
		ReactionLease: j.lease, Failure: o.failure, DeadLetter: o.permanent, RetryAtMs: retryAt.UnixMilli(),
	})
	if err != nil {
		r.log.Warn("reactions: recording a failure failed; the lease expires and the reaction is retried", "err", err)
		return
	}
	if !ok {
		r.stats.LostLeases.Add(1)
		r.metrics.outcome("lost")
		return
	}
	if st == storage.ReactionDeadLetter {
		r.stats.DeadLettered.Add(1)
		r.metrics.terminal(bus.ReactionDeadLettered, j.r.Attempts)
		r.pub.publish(bus.ReactionDeadLettered, j.r, o.failure.Code, 0, now)
		return
	}
	r.stats.Failed.Add(1)
	r.metrics.outcome(bus.ReactionFailed)
	r.pub.publish(bus.ReactionFailed, j.r, o.failure.Code, retryAt.UnixMilli(), now)
	r.scheduleRetry(retryAt)
}

// lose gives up a reaction whose lease is gone.
func (r *Runner) lose() {
	r.stats.LostLeases.Add(1)
	r.metrics.outcome("lost")
	r.release(1)
}

// ack records completions in batches: one store call per batch of
// whatever finished meanwhile, so completions cost a fraction of a
// transaction each.
func (r *Runner) ack() {
	defer r.loops.Done()
	batch := make([]*job, 0, storage.MaxReactionBatch)
	for {
		select {
		case j := <-r.acks:
			batch = r.collect(append(batch[:0], j))
			r.complete(batch)
		case <-r.ackStop:
			// Every job has returned: record what is queued, then exit.
			for batch = r.collect(batch[:0]); len(batch) > 0; batch = r.collect(batch[:0]) {
				r.complete(batch)
			}
			return
		}
	}
}

// collect appends the completions already queued, up to a batch.
func (r *Runner) collect(batch []*job) []*job {
	for len(batch) < storage.MaxReactionBatch {
		select {
		case j := <-r.acks:
			batch = append(batch, j)
		default:
			return batch
		}
	}
	return batch
}

func (r *Runner) complete(batch []*job) {
	defer r.release(len(batch))
	now := r.now()
	leases := make([]storage.ReactionLease, len(batch))
	for i, j := range batch {
		leases[i] = j.lease
	}
	done, err := r.cfg.Store.ReactionComplete(context.WithoutCancel(r.jobCtx), storage.ReactionCompleteParams{Leases: leases, NowMs: now.UnixMilli()})
	r.mu.Lock()
	for _, j := range batch {
		delete(r.leases, j.lease.ReactionKey) // a worker's job was never there
	}
	r.mu.Unlock()
	if err != nil {
		r.log.Warn("reactions: recording completions failed; the leases expire and the reactions run again", "n", len(batch), "err", err)
		return
	}
	for i, j := range batch {
		if !done[i] {
			r.stats.LostLeases.Add(1)
			r.metrics.outcome("lost")
			continue
		}
		r.metrics.terminal(bus.ReactionCompleted, j.r.Attempts)
		r.stats.Completed.Add(1)
		r.pub.publish(bus.ReactionCompleted, j.r, "", 0, now)
	}
}

// heartbeat extends the leases of running Go handlers every Heartbeat;
// a handler whose lease is gone is cancelled.
func (r *Runner) heartbeat() {
	defer r.loops.Done()
	t := time.NewTicker(r.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-r.ackStop: // after every job returned: leases are kept through a graceful stop
			return
		case <-t.C:
		}
		r.mu.Lock()
		jobs := make([]*job, 0, len(r.leases))
		for _, j := range r.leases {
			jobs = append(jobs, j)
		}
		r.mu.Unlock()
		for len(jobs) > 0 {
			chunk := jobs[:min(len(jobs), storage.MaxReactionBatch)]
			jobs = jobs[len(chunk):]
			leases := make([]storage.ReactionLease, len(chunk))
			for i, j := range chunk {
				leases[i] = j.lease
			}
			ok, err := r.cfg.Store.ReactionExtend(context.WithoutCancel(r.jobCtx), storage.ReactionExtendParams{Leases: leases, UntilMs: r.now().Add(r.cfg.Lease).UnixMilli()})
			if err != nil {
				r.log.Warn("reactions: extending leases failed", "err", err)
				break
			}
			r.mu.Lock()
			for i, j := range chunk {
				if !ok[i] && !j.lost {
					j.lost = true
					j.cancel()
				}
			}
			r.mu.Unlock()
		}
	}
}
