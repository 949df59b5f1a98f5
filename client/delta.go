package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// applyDelta applies one realtime delta — a complete SSP2 response
// (SPEC.md §8.2) — through the rounds' streaming apply, under the round
// lock, so it never interleaves with a round. It returns the cursor to
// acknowledge (0: none) and whether a section was skipped that a round
// must repair. A delta that fails to decode or apply is an error: the
// caller treats it as dropped. The caller reports res to AppliedFunc.
func (c *Client) applyDelta(ctx context.Context, msg []byte) (ack int64, needRound bool, res Result, err error) {
	c.syncMu.Lock()
	defer c.syncMu.Unlock()
	c.mu.Lock()
	stopped := c.stopped
	c.mu.Unlock()
	if stopped != nil {
		return 0, false, res, nil
	}
	r := &roundState{c: c, ctx: ctx, res: &res, delta: true}
	_, err = r.run(bytes.NewReader(msg))
	if r.dirty {
		if serr := c.save(context.WithoutCancel(ctx)); serr != nil && err == nil {
			err = fmt.Errorf("sync: %w", serr)
		}
	}
	switch {
	case errors.Is(err, errDeltaDiscontinuous):
		return 0, true, res, nil
	case err != nil:
		return 0, true, res, fmt.Errorf("apply delta: %w", err)
	}
	return r.acked, r.needRound, res, nil
}
