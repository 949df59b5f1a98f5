// Package leases issues, slides, verifies and revokes auth leases (SPEC.md
// §7.3): a time-bounded grant of the scopes an actor's resolver returned,
// kept per (partition, client id) in SQL and signed at rest with the
// node's key, so a request during a resolver outage is served with the
// lease's scopes until it expires or is revoked.
package leases

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// MinKeyBytes is the shortest signing key accepted.
const MinKeyBytes = 32

// Config configures Leases.
type Config struct {
	// TTL is a lease's validity window from its last refresh. Required.
	TTL time.Duration
	// Key signs every stored record (HMAC-SHA256). Required, at least
	// MinKeyBytes.
	Key []byte
	// Store keeps the records. Required.
	Store  storage.LeaseStore
	Logger *slog.Logger
}

// Validate reports every invalid setting (Store is wiring, checked by New).
func (c Config) Validate() error {
	var errs []error
	if c.TTL < time.Second {
		errs = append(errs, fmt.Errorf("leases config: TTL %v must be at least 1s", c.TTL))
	}
	if len(c.Key) < MinKeyBytes {
		errs = append(errs, fmt.Errorf("leases config: Key must be at least %d bytes", MinKeyBytes))
	}
	return errors.Join(errs...)
}

// Metrics count what the lease authority did.
type Metrics struct {
	Issued     atomic.Int64 // a new lease id
	Refreshed  atomic.Int64 // a stored lease slid
	Served     atomic.Int64 // requests authorized by a lease during an outage
	Required   atomic.Int64 // outage requests refused: no valid lease
	Revoked    atomic.Int64 // outage requests refused: revoked lease
	BadRecords atomic.Int64 // stored records whose signature did not verify
}

// Leases implements engine.LeaseAuthority over a storage.LeaseStore.
type Leases struct {
	cfg     Config
	ttlMs   int64
	slackMs int64
	log     *slog.Logger
	metrics Metrics
}

// New validates cfg and returns the lease authority.
func New(cfg Config) (*Leases, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Store == nil {
		return nil, errors.New("leases: Store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ttl := cfg.TTL.Milliseconds()
	// A refresh within 1% of the window of the last one (at most a
	// second) with the same scopes reuses the stored record: the
	// window it reports is that much shorter, and a busy client costs
	// no write per round.
	return &Leases{cfg: cfg, ttlMs: ttl, slackMs: min(ttl/100, 1000), log: cfg.Logger}, nil
}

// Metrics returns the counters.
func (l *Leases) Metrics() *Metrics { return &l.metrics }

// Refresh issues or slides the lease of (partition, clientID) after the
// resolver granted allowed (SPEC.md §7.3.3). The lease id is stable across
// refreshes; a revoked lease is never refreshed (ok=false: no LEASE
// frame) until an operator clears it.
func (l *Leases) Refresh(ctx context.Context, partition, clientID, actorID string, allowed engine.Allowed, nowMs int64) (ssp2.Lease, bool, error) {
	doc, err := canonicalAllowed(allowed)
	if err != nil {
		return ssp2.Lease{}, false, err
	}
	stored, ok, err := l.cfg.Store.LeaseGet(ctx, partition, clientID)
	if err != nil {
		return ssp2.Lease{}, false, err
	}
	id := ""
	if ok && l.verify(stored) {
		if stored.Revoked {
			return ssp2.Lease{}, false, nil
		}
		if stored.ActorID == actorID {
			id = stored.LeaseID
			if string(stored.Allowed) == string(doc) && nowMs >= stored.IssuedAtMs && nowMs-stored.IssuedAtMs < l.slackMs {
				return ssp2.Lease{LeaseID: id, ExpiresAtMs: stored.ExpiresAtMs}, true, nil
			}
		}
	}
	rec := storage.Lease{Partition: partition, ClientID: clientID, LeaseID: id, ActorID: actorID,
		Allowed: doc, IssuedAtMs: nowMs, ExpiresAtMs: nowMs + l.ttlMs}
	if rec.LeaseID == "" {
		rec.LeaseID = newID()
		l.metrics.Issued.Add(1)
	} else {
		l.metrics.Refreshed.Add(1)
	}
	rec.Signature = l.sign(rec)
	if err := l.cfg.Store.LeasePut(ctx, rec); err != nil {
		return ssp2.Lease{}, false, err
	}
	return ssp2.Lease{LeaseID: rec.LeaseID, ExpiresAtMs: rec.ExpiresAtMs}, true, nil
}

// Authorize returns the allowed scopes of the valid lease of (partition,
// clientID) held by actorID, for a request during a resolver outage:
// sync.auth_lease_required when there is none, it expired, it is
// another actor's or its record does not verify; sync.auth_lease_revoked
// when it was revoked (SPEC.md §7.3.3–§7.3.4).
func (l *Leases) Authorize(ctx context.Context, partition, clientID, actorID string, nowMs int64) (engine.Allowed, error) {
	stored, ok, err := l.cfg.Store.LeaseGet(ctx, partition, clientID)
	if err != nil {
		return nil, err
	}
	required := func(why string) error {
		l.metrics.Required.Add(1)
		return ssp2.Errorf(ssp2.CodeAuthLeaseRequired, "the scope resolver is unavailable and %s", why)
	}
	switch {
	case !ok:
		return nil, required("this client holds no auth lease")
	case !l.verify(stored):
		l.metrics.BadRecords.Add(1)
		l.log.Error("auth lease record fails its signature; refusing it", "partition", partition, "client", clientID, "lease", stored.LeaseID)
		return nil, required("this client's auth lease is not valid")
	case stored.Revoked:
		l.metrics.Revoked.Add(1)
		return nil, ssp2.Errorf(ssp2.CodeAuthLeaseRevoked, "the auth lease %s was revoked", stored.LeaseID)
	case stored.ActorID != actorID:
		return nil, required("this client's auth lease is another actor's")
	case nowMs >= stored.ExpiresAtMs:
		return nil, required("this client's auth lease expired")
	}
	var allowed engine.Allowed
	if err := json.Unmarshal(stored.Allowed, &allowed); err != nil {
		return nil, fmt.Errorf("lease %s: allowed scopes: %w", stored.LeaseID, err)
	}
	l.metrics.Served.Add(1)
	return allowed, nil
}

// Revoke marks the lease leaseID of partition revoked (re-signed) and
// reports whether it exists. Revoking twice is a no-op.
func (l *Leases) Revoke(ctx context.Context, partition, leaseID string) (bool, error) {
	return Revoke(ctx, l.cfg.Store, l.cfg.Key, partition, leaseID)
}

// Revoke is Leases.Revoke over a store and key, for operator commands
// that run without a node.
func Revoke(ctx context.Context, st storage.LeaseStore, key []byte, partition, leaseID string) (bool, error) {
	rec, ok, err := st.LeaseByID(ctx, partition, leaseID)
	if err != nil || !ok {
		return false, err
	}
	if rec.Revoked {
		return true, nil
	}
	rec.Revoked = true
	rec.Signature = sign(key, rec)
	return true, st.LeasePut(ctx, rec)
}

// Clear deletes the lease leaseID of partition, revoked or not, and
// reports whether it existed: the client's next authorized round mints a
// fresh lease id.
func (l *Leases) Clear(ctx context.Context, partition, leaseID string) (bool, error) {
	return Clear(ctx, l.cfg.Store, partition, leaseID)
}

// Clear is Leases.Clear over a store, for operator commands that run
// without a node.
func Clear(ctx context.Context, st storage.LeaseStore, partition, leaseID string) (bool, error) {
	return st.LeaseDelete(ctx, partition, leaseID)
}

func (l *Leases) sign(r storage.Lease) []byte { return sign(l.cfg.Key, r) }

func (l *Leases) verify(r storage.Lease) bool { return hmac.Equal(r.Signature, l.sign(r)) }

// sign is the MAC of every field of a record but the signature, each
// length-prefixed so no two records share an input.
func sign(key []byte, r storage.Lease) []byte {
	m := hmac.New(sha256.New, key)
	var n [8]byte
	for _, f := range [][]byte{[]byte(r.Partition), []byte(r.ClientID), []byte(r.LeaseID), []byte(r.ActorID), r.Allowed} {
		binary.LittleEndian.PutUint64(n[:], uint64(len(f)))
		m.Write(n[:])
		m.Write(f)
	}
	for _, v := range []int64{r.IssuedAtMs, r.ExpiresAtMs} {
		binary.LittleEndian.PutUint64(n[:], uint64(v))
		m.Write(n[:])
	}
	if r.Revoked {
		m.Write([]byte{1})
	} else {
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// canonicalAllowed is the stored form of an allowed map: JSON with sorted
// keys and each value list as resolved.
func canonicalAllowed(a engine.Allowed) ([]byte, error) {
	out := make(map[string][]string, len(a))
	for _, k := range slices.Sorted(maps.Keys(a)) {
		out[k] = a[k]
		if out[k] == nil {
			out[k] = []string{}
		}
	}
	return json.Marshal(out)
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
