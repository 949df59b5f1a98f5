package bus

import (
	"context"
	"time"
)

// Setup retries: in a cluster whose members start together, creating an
// R3 stream or bucket can time out while the meta leader settles, or find
// one another member is still creating (NATS-NOTES pitfall 11).
const (
	SetupAttempt  = 2 * time.Second
	SetupPatience = 30 * time.Second
)

// RetrySetup runs fn in attempts of at most SetupAttempt each until it
// succeeds, fails permanently (permanent reports so), ctx ends or
// SetupPatience has passed; it returns fn's last error.
func RetrySetup(ctx context.Context, fn func(context.Context) error, permanent func(error) bool) error {
	deadline := time.Now().Add(SetupPatience)
	for {
		actx, cancel := context.WithTimeout(ctx, SetupAttempt)
		err := fn(actx)
		cancel()
		if err == nil || permanent(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}
