package pgstore

import (
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncnode/syncnode/storage"
)

// Idempotency hints. A push looks its key up without the lock
// (Store.IdempotencyGet, RequestStart) and, on a miss, takes the lock and
// looks again (Tx.IdempotencyGet). The store remembers the keys whose
// optimistic lookup missed, per partition, for a moment; the write
// transaction that takes the partition's lock reads their results in the
// lock's own pipeline, and a write group again with each member's release
// (the keys hinted since), so the re-check that follows costs no round
// trip. The read is a statement after the lock, so it sees every commit
// that held the lock before; nothing else stores results of a locked
// partition. A hint is only a guess at which keys are coming: a key
// without one is looked up as before.

// Hint bounds: how many keys a partition keeps (the oldest go first), for
// how long, and how many partitions keep hints (past it they are all
// forgotten: a hint only saves a round trip).
const (
	maxHintsPerPartition = 64
	hintTTL              = 5 * time.Second
	maxHintPartitions    = 4096
)

type hint struct {
	key idemKey
	at  time.Time
}

type idemHints struct {
	mu sync.Mutex
	m  map[string][]hint // partition → misses, oldest first
}

func (h *idemHints) add(partition string, key idemKey) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.m[partition]; h.m == nil || !ok && len(h.m) >= maxHintPartitions {
		h.m = map[string][]hint{}
	}
	hs := h.m[partition]
	drop := 0
	for drop < len(hs) && (now.Sub(hs[drop].at) > hintTTL || len(hs)-drop >= maxHintsPerPartition) {
		drop++
	}
	hs = append(hs[drop:], hint{key: key, at: now})
	h.m[partition] = hs
}

// drop forgets a key once its result is stored.
func (h *idemHints) drop(partition string, key idemKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hs := h.m[partition]
	for i := range hs {
		if hs[i].key == key {
			hs = append(hs[:i:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(h.m, partition)
	} else {
		h.m[partition] = hs
	}
}

// keys returns the partition's hinted keys not in skip.
func (h *idemHints) keys(partition string, skip map[idemKey]*storage.PushRecord) []idemKey {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []idemKey
	for _, x := range h.m[partition] {
		if _, ok := skip[x.key]; !ok {
			out = append(out, x.key)
		}
	}
	return out
}

const qIdempotencyPrefetch = `SELECT client_id, client_commit_id, status, commit_seq, result, created_at_ms, coalesce(actor_id, '')
	FROM sync_idempotency WHERE partition = $1
	AND (client_id, client_commit_id) IN (SELECT * FROM unnest($2::text[], $3::text[]))`

// queuePrefetch queues the read of the partition's hinted push results;
// it must follow the lock.
func (t *tx) queuePrefetch(partition string) {
	keys := t.s.hints.keys(partition, t.pre)
	if len(keys) == 0 {
		return
	}
	clients, commits := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		clients[i], commits[i] = k.clientID, k.clientCommitID
	}
	t.queueQuery(func(rows pgx.Rows) error {
		found := make(map[idemKey]*storage.PushRecord, len(keys))
		for rows.Next() {
			var (
				r      storage.PushRecord
				status int16
			)
			if err := rows.Scan(&r.ClientID, &r.ClientCommitID, &status, &r.CommitSeq, &r.Result, &r.CreatedAtMs, &r.ActorID); err != nil {
				return err
			}
			r.Status = storage.PushStatus(status)
			found[idemKey{r.ClientID, r.ClientCommitID}] = &r
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if t.pre == nil {
			t.pre = make(map[idemKey]*storage.PushRecord, len(keys))
		}
		for _, k := range keys {
			t.pre[k] = found[k]
		}
		return nil
	}, qIdempotencyPrefetch, partition, clients, commits)
}
