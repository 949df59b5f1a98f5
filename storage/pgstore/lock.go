package pgstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
)

var _ storage.Locker = (*Store)(nil)

// lockCheckInterval is how often a held lock's session is checked: the
// bound on how late a holder notices that its lock is gone.
const lockCheckInterval = time.Second

// Lock implements storage.Locker with a session-level advisory lock,
// pg_advisory_lock(hashtext(name), hashtext(current_schema())), on a
// connection of its own (not the pool's: a held lock — or a wait for one
// — must not take a pooled connection from the requests, and the session
// is what holds it). The wait is the server's: no polling, and the
// database grants the lock to a waiter the moment the holder's session
// ends, whatever ended it, so a killed holder hands over at once.
func (s *Store) Lock(ctx context.Context, name string) (storage.Lock, error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("pgstore: lock %q: connect: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1), hashtext(current_schema()))", name); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("pgstore: lock %q: %w", name, err)
	}
	l := &pgLock{conn: conn, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go l.watch()
	return l, nil
}

// pgLock is a held advisory lock and the session holding it.
type pgLock struct {
	mu   sync.Mutex // the connection is not safe for concurrent use
	conn *pgx.Conn

	lost     chan struct{}
	lostOnce sync.Once
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

func (l *pgLock) Lost() <-chan struct{} { return l.lost }

// watch pings the session every lockCheckInterval and declares the lock
// lost when a ping fails.
func (l *pgLock) watch() {
	defer close(l.done)
	t := time.NewTicker(lockCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		ctx, cancel := context.WithTimeout(context.Background(), lockCheckInterval)
		err := l.conn.Ping(ctx)
		cancel()
		l.mu.Unlock()
		if err != nil {
			l.end(context.Background())
			return
		}
	}
}

// end closes the session (which releases the lock) and marks it lost.
func (l *pgLock) end(ctx context.Context) error {
	var err error
	l.lostOnce.Do(func() {
		l.mu.Lock()
		err = l.conn.Close(ctx)
		l.mu.Unlock()
		close(l.lost)
	})
	return err
}

func (l *pgLock) Release(ctx context.Context) error {
	l.stopOnce.Do(func() { close(l.stop) })
	<-l.done
	return l.end(ctx)
}
