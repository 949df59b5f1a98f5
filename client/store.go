package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/syncnode/syncnode/ssp2"
)

// Store persists a client's durable state: its clientId, the accepted log
// epoch, the subscriptions with their cursors, resume tokens and last
// effective scopes, and the outbox. Save replaces the whole state and must
// be atomic: after a crash, Load returns either the previous or the new
// state, never a mix.
//
// The client saves when a commit is queued (the outbox is durable before
// Commit returns), after push results drain it, at every SUB_END (the
// only point where a cursor or resume token may advance, SPEC.md §1.4) and
// after a log reset.
type Store interface {
	// Load returns the saved state, or nil when nothing was saved yet.
	Load(ctx context.Context) (*State, error)
	Save(ctx context.Context, st *State) error
	// KeepsRows reports whether Save wants the replica's rows in
	// State.Rows. A store that does not keep them loses the replica on
	// restart, so the client re-bootstraps every subscription then: a
	// cursor must never vouch for rows the replica no longer holds.
	KeepsRows() bool
}

// stateFormat is the version of the State layout.
const stateFormat = 1

// State is what a Store persists. Treat it as opaque; it is exported so
// stores can be written outside this package.
type State struct {
	Format        int                 `json:"format"`
	ClientID      string              `json:"clientId"`
	SchemaVersion int32               `json:"schemaVersion"`
	LogEpoch      string              `json:"logEpoch,omitempty"`
	CommitCounter int64               `json:"commitCounter"`
	Subscriptions []SubscriptionState `json:"subscriptions"`
	Outbox        []PendingCommit     `json:"outbox"`
	// Rows is the replica by table, ordered by rowId; nil when the store
	// does not keep rows.
	Rows map[string][]StoredRow `json:"rows,omitempty"`
	// Lease is the auth lease of the last LEASE frame (SPEC.md §7.3.5).
	Lease *Lease `json:"lease,omitempty"`
}

// Lease is an auth lease as the server issued it: opaque, never
// verified by the client (SPEC.md §7.3.5).
type Lease struct {
	ID          string `json:"leaseId"`
	ExpiresAtMs int64  `json:"expiresAtMs"`
}

// SubscriptionState is one registered subscription.
type SubscriptionState struct {
	ID     string              `json:"id"`
	Table  string              `json:"table"`
	Scopes map[string][]string `json:"scopes"`
	// Cursor is -1 until the first bootstrap completes a round.
	Cursor         int64           `json:"cursor"`
	BootstrapState json.RawMessage `json:"bootstrapState,omitempty"`
	// Effective is the last effective-scope echo of an active section:
	// what a revocation purges (SPEC.md §3.3).
	Effective map[string][]string `json:"effective,omitempty"`
	// Status is "", "active", "revoked"; Reason the last reason code.
	Status string `json:"status,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// PendingCommit is one queued commit: the exact operations pushed under
// its clientCommitId on every attempt.
type PendingCommit struct {
	ClientCommitID string             `json:"clientCommitId"`
	Operations     []PendingOperation `json:"operations"`
}

// PendingOperation is one push operation with its encoded payload.
type PendingOperation struct {
	Table       string  `json:"table"`
	RowID       string  `json:"rowId"`
	Op          ssp2.Op `json:"op"` // 1 upsert, 2 delete
	BaseVersion *int64  `json:"baseVersion,omitempty"`
	// Payload is an upsert's row: full-row codec bytes, or, when Sparse,
	// a sparse row (wire version 3) of the columns it writes.
	Payload []byte `json:"payload,omitempty"`
	Sparse  bool   `json:"sparse,omitempty"`
}

// StoredRow is one persisted replica row.
type StoredRow struct {
	ID      string `json:"id"`
	Version int64  `json:"version"`
	Row     []byte `json:"row"`
}

// MemoryStore keeps the state in memory: durable for the life of the
// process, and shareable by successive clients (a client rebuilt on the
// same MemoryStore behaves like an app restart).
type MemoryStore struct {
	// Rows makes the store keep the replica's rows too. Each save then
	// copies the replica; leave it off for large replicas that do not need
	// to survive a rebuild.
	Rows bool

	mu sync.Mutex
	st *State // a private deep copy
}

// Load returns a copy of the last saved state.
func (m *MemoryStore) Load(context.Context) (*State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.st == nil {
		return nil, nil
	}
	return m.st.clone(), nil
}

// Save keeps a copy of st.
func (m *MemoryStore) Save(_ context.Context, st *State) error {
	cp := st.clone()
	m.mu.Lock()
	m.st = cp
	m.mu.Unlock()
	return nil
}

// KeepsRows reports m.Rows.
func (m *MemoryStore) KeepsRows() bool { return m.Rows }

// clone deep-copies the state (row bytes are immutable and shared).
func (st *State) clone() *State {
	cp := *st
	cp.Subscriptions = make([]SubscriptionState, len(st.Subscriptions))
	for i, s := range st.Subscriptions {
		s.Scopes, s.Effective = cloneScopes(s.Scopes), cloneScopes(s.Effective)
		s.BootstrapState = bytes.Clone(s.BootstrapState)
		cp.Subscriptions[i] = s
	}
	cp.Outbox = make([]PendingCommit, len(st.Outbox))
	for i, pc := range st.Outbox {
		ops := make([]PendingOperation, len(pc.Operations))
		for j, o := range pc.Operations {
			if o.BaseVersion != nil {
				v := *o.BaseVersion
				o.BaseVersion = &v
			}
			ops[j] = o
		}
		cp.Outbox[i] = PendingCommit{ClientCommitID: pc.ClientCommitID, Operations: ops}
	}
	if st.Rows != nil {
		cp.Rows = make(map[string][]StoredRow, len(st.Rows))
		for t, rows := range st.Rows {
			cp.Rows[t] = slices.Clone(rows)
		}
	}
	return &cp
}

func cloneScopes(m map[string][]string) map[string][]string {
	if m == nil {
		return nil
	}
	cp := make(map[string][]string, len(m))
	for k, v := range m {
		cp[k] = slices.Clone(v)
	}
	return cp
}

// FileStore keeps the state, rows included, in one JSON file. Save writes
// a temporary file beside it, fsyncs it, renames it over the old one and
// fsyncs the directory, so a crash leaves either state whole.
type FileStore struct {
	Path string
}

// Load reads the file; a missing file is an empty state.
func (f *FileStore) Load(context.Context) (*State, error) {
	b, err := os.ReadFile(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load state: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("load state %s: %w", f.Path, err)
	}
	return &st, nil
}

// Save replaces the file atomically.
func (f *FileStore) Save(ctx context.Context, st *State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	dir := filepath.Dir(f.Path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.Path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("save state: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("save state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if err := os.Rename(tmp.Name(), f.Path); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("save state: sync directory: %w", err)
	}
	return nil
}

// KeepsRows is true: the file holds the replica.
func (f *FileStore) KeepsRows() bool { return true }
