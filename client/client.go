package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// Config configures a Client.
type Config struct {
	// BaseURL is the mount of the sync routes: POST {BaseURL}/sync and
	// GET {BaseURL}/segments/{id}.
	BaseURL string
	// Token is a static bearer token; TokenFunc, when set, is asked for
	// one before every request instead (so it can refresh).
	Token     string
	TokenFunc func(ctx context.Context) (string, error)
	// ClientID is the stable per-replica id. Empty: the stored one, or a
	// new random id on first use. A ClientID that differs from the stored
	// one is refused: the stored outbox and cursors belong to that id.
	ClientID string
	// Schema is the schema the client speaks; its Version is sent as
	// REQ_HEADER.schemaVersion.
	Schema *schema.Schema
	// HTTPClient sends the requests (default: a shared client with a
	// large idle-connection pool).
	HTTPClient *http.Client
	// Store persists the durable state (default: a new MemoryStore).
	Store Store
	// Pull sets the PULL_HEADER limits and delivery capabilities.
	Pull PullOptions
	// CommitID makes clientCommitIds deterministic: it is called with the
	// client's commit counter (1, 2, …, persisted). Default: random
	// 128-bit ids.
	CommitID func(n int64) string
	// MaxOperations bounds the operations pushed in one request; the
	// outbox drains over several rounds when it holds more. It must not
	// exceed the server's cap (default 500, the server's default).
	MaxOperations int
	// AcceptEncoding is sent on /sync requests (default "zstd, gzip";
	// "identity" asks for an uncompressed response).
	AcceptEncoding string
	// SegmentAcceptEncoding is sent on segment downloads (default
	// "zstd, gzip").
	SegmentAcceptEncoding string
	// NowFunc is the client's clock, which signed URLs are not fetched
	// past (default time.Now).
	NowFunc func() time.Time
	// MaxRounds bounds SyncUntilIdle (default 10 000).
	MaxRounds int
	// WireVersion is the SSP2 wire version spoken: 3 (the default) pushes
	// sparse rows of the columns a write changes and reports conflicts per
	// column; 2 pushes full rows, for servers that do not speak 3.
	WireVersion uint16
	// AppliedFunc, when set, is called after every round and every
	// realtime delta that changed the replica (commits, segments, a log
	// reset, a revocation), from the goroutine that applied it and after
	// the client is free for the next round. It must not block for long.
	AppliedFunc func(Result)
}

// PullOptions are the PULL_HEADER fields (SPEC.md §4.2). Zero limits ask
// for the server's defaults.
type PullOptions struct {
	LimitCommits      int32
	LimitSnapshotRows int32
	MaxSnapshotPages  int32
	// Accept is the delivery bitmask (SPEC.md §4.2): bit 0 inline rows
	// segments, bit 1 referenced rows segments (default both, 3), bit 2
	// SQLite images (ssp2.AcceptSQLite), bit 3 signed URLs
	// (ssp2.AcceptSignedURLs).
	Accept uint8
}

// Defaults.
const (
	DefaultMaxOperations  = 500
	DefaultAcceptEncoding = "zstd, gzip"
	DefaultMaxRounds      = 10_000
	DefaultWireVersion    = 3
)

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.HTTPClient == nil {
		c.HTTPClient = defaultHTTPClient
	}
	if c.Store == nil {
		c.Store = &MemoryStore{}
	}
	if c.Pull.Accept == 0 {
		c.Pull.Accept = ssp2.AcceptInlineRows | ssp2.AcceptExternalRows
	}
	if c.MaxOperations == 0 {
		c.MaxOperations = DefaultMaxOperations
	}
	if c.AcceptEncoding == "" {
		c.AcceptEncoding = DefaultAcceptEncoding
	}
	if c.SegmentAcceptEncoding == "" {
		c.SegmentAcceptEncoding = DefaultAcceptEncoding
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.MaxRounds == 0 {
		c.MaxRounds = DefaultMaxRounds
	}
	if c.WireVersion == 0 {
		c.WireVersion = DefaultWireVersion
	}
	return c
}

// Validate refuses bad values with field-specific errors.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("client config: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if _, err := parseBaseURL(c.BaseURL); err != nil {
		bad("BaseURL", "%v", err)
	}
	if c.Schema == nil {
		bad("Schema", "required")
	}
	if c.Pull.Accept&(ssp2.AcceptInlineRows|ssp2.AcceptExternalRows) == 0 {
		bad("Pull.Accept", "0x%02x allows neither inline nor referenced rows segments", c.Pull.Accept)
	}
	if c.Pull.Accept&0xF0 != 0 {
		bad("Pull.Accept", "0x%02x sets reserved bits 4–7", c.Pull.Accept)
	}
	if c.Pull.LimitCommits < 0 || c.Pull.LimitSnapshotRows < 0 || c.Pull.MaxSnapshotPages < 0 {
		bad("Pull", "limits must not be negative")
	}
	if c.MaxOperations < 1 {
		bad("MaxOperations", "%d must be positive", c.MaxOperations)
	}
	if c.MaxRounds < 1 {
		bad("MaxRounds", "%d must be positive", c.MaxRounds)
	}
	if c.WireVersion != 2 && c.WireVersion != 3 {
		bad("WireVersion", "%d is not 2 or 3", c.WireVersion)
	}
	return errors.Join(errs...)
}

// Client is an SSP2 client (wire version 3, or 2) with a local replica
// and an outbox. Reads (Rows, Row, Count, Pending, Subscriptions) and Commit are
// safe to call concurrently with each other and with Sync; rounds run one
// at a time.
type Client struct {
	cfg     Config
	baseURL *url.URL
	syncURL string
	schema  *schema.Schema
	rep     *replica

	syncMu sync.Mutex // one round (or delta apply) at a time
	saveMu sync.Mutex // orders saves
	// live is the connected realtime socket rounds ride, nil when there
	// is none (SPEC.md §8.7).
	live atomic.Pointer[socket]

	mu       sync.Mutex // guards the fields below
	clientID string
	epoch    string
	counter  int64
	subs     []*SubscriptionState
	outbox   []*PendingCommit
	stopped  error // a stop state (schema floor): returned by every Sync
	rt       *Realtime
	lease    *Lease
}

// Lease returns the auth lease of the last LEASE frame (SPEC.md §7.3.5);
// ok is false when no server has issued one.
func (c *Client) Lease() (Lease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lease == nil {
		return Lease{}, false
	}
	return *c.lease, true
}

func (c *Client) setLease(l Lease) {
	c.mu.Lock()
	c.lease = &l
	c.mu.Unlock()
}

// New validates cfg, loads the stored state and returns the client.
func New(cfg Config) (*Client, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	u, _ := parseBaseURL(cfg.BaseURL)
	c := &Client{
		cfg:     cfg,
		baseURL: u,
		syncURL: u.JoinPath("sync").String(),
		schema:  cfg.Schema,
		rep:     newReplica(cfg.Schema),
	}
	ctx := context.Background()
	st, err := cfg.Store.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	if err := c.restore(st); err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	if st == nil || st.ClientID != c.clientID {
		if err := c.save(ctx); err != nil {
			return nil, fmt.Errorf("new client: %w", err)
		}
	}
	return c, nil
}

// restore adopts a loaded state (nil: first start).
func (c *Client) restore(st *State) error {
	if st == nil {
		c.clientID = c.cfg.ClientID
		if c.clientID == "" {
			c.clientID = "go-" + randomID()
		}
		return nil
	}
	if st.Format != stateFormat {
		return fmt.Errorf("stored state has format %d, want %d", st.Format, stateFormat)
	}
	if c.cfg.ClientID != "" && st.ClientID != c.cfg.ClientID {
		return fmt.Errorf("stored state belongs to client %q, not %q", st.ClientID, c.cfg.ClientID)
	}
	c.clientID, c.epoch, c.counter, c.lease = st.ClientID, st.LogEpoch, st.CommitCounter, st.Lease
	for i := range st.Outbox {
		pc := st.Outbox[i]
		for _, o := range pc.Operations {
			if o.Sparse && c.cfg.WireVersion < 3 {
				return fmt.Errorf("stored commit %s holds wire version 3 patches, which wire version %d cannot send", pc.ClientCommitID, c.cfg.WireVersion)
			}
		}
		c.outbox = append(c.outbox, &pc)
	}
	for i := range st.Subscriptions {
		s := st.Subscriptions[i]
		c.subs = append(c.subs, &s)
	}
	// The cursors vouch for the replica's rows. When those did not come
	// back whole (a store that keeps no rows, rows that no longer decode,
	// a different schema version), every subscription bootstraps afresh.
	intact := c.cfg.Store.KeepsRows() && st.Rows != nil && st.SchemaVersion == c.schema.Version && c.rep.load(st.Rows)
	if !intact {
		c.rep.clear()
		for _, s := range c.subs {
			s.Cursor, s.BootstrapState, s.Effective = -1, nil, nil
			if s.Status == statusActive {
				s.Status = ""
			}
		}
	}
	return nil
}

// Subscription statuses kept in SubscriptionState.Status.
const (
	statusActive  = "active"
	statusRevoked = "revoked"
)

// snapshot builds the state to persist. Caller holds no locks.
func (c *Client) snapshot() *State {
	c.mu.Lock()
	st := &State{
		Format: stateFormat, ClientID: c.clientID, SchemaVersion: c.schema.Version,
		LogEpoch: c.epoch, CommitCounter: c.counter, Lease: c.lease,
		Subscriptions: make([]SubscriptionState, len(c.subs)),
		Outbox:        make([]PendingCommit, len(c.outbox)),
	}
	for i, s := range c.subs {
		st.Subscriptions[i] = *s
	}
	for i, pc := range c.outbox {
		st.Outbox[i] = *pc
	}
	c.mu.Unlock()
	if c.cfg.Store.KeepsRows() {
		st.Rows = c.rep.snapshot()
	}
	return st
}

// save persists the current state.
func (c *Client) save(ctx context.Context) error {
	c.saveMu.Lock()
	defer c.saveMu.Unlock()
	return c.cfg.Store.Save(ctx, c.snapshot())
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ClientID returns the client's id.
func (c *Client) ClientID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clientID
}

// LogEpoch returns the accepted log epoch ("" before the first round).
func (c *Client) LogEpoch() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// Subscribe registers a subscription: the table and requested scopes
// (variable → values) it pulls. The registration list is sent with every
// pull and persisted with the state at the next save; a registration is
// immutable, so subscribing again with the same id and intent is a no-op
// (ErrSubscriptionMismatch for another table or scopes) — except that it
// re-arms a revoked subscription, which bootstraps afresh.
func (c *Client) Subscribe(id, table string, scopes map[string][]string) error {
	if id == "" {
		return errors.New("subscribe: empty subscription id")
	}
	if _, ok := c.schema.Table(table); !ok {
		return fmt.Errorf("subscribe %s: unknown table %q", id, table)
	}
	if len(scopes) == 0 {
		return fmt.Errorf("subscribe %s: no scopes", id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.subs {
		if s.ID != id {
			continue
		}
		if s.Table != table || string(ssp2.CanonicalScopes(s.Scopes)) != string(ssp2.CanonicalScopes(scopes)) {
			return fmt.Errorf("subscribe %s: %w", id, ErrSubscriptionMismatch)
		}
		if s.Status == statusRevoked {
			s.Cursor, s.BootstrapState, s.Effective, s.Status, s.Reason = -1, nil, nil, "", ""
		}
		return nil
	}
	cp := make(map[string][]string, len(scopes))
	for k, v := range scopes {
		cp[k] = slices.Clone(v)
	}
	c.subs = append(c.subs, &SubscriptionState{ID: id, Table: table, Scopes: cp, Cursor: -1})
	return nil
}

// hasSubscriptions reports whether a subscription still pulls.
func (c *Client) hasSubscriptions() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.subs {
		if s.Status != statusRevoked {
			return true
		}
	}
	return false
}

// Unsubscribe drops a registration: the next pull omits it, which
// unregisters it on the server (SPEC.md §4.1). Its rows stay in the
// replica; they stop receiving changes.
func (c *Client) Unsubscribe(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs = slices.DeleteFunc(c.subs, func(s *SubscriptionState) bool { return s.ID == id })
}

// Subscriptions returns a copy of the registrations and their progress.
func (c *Client) Subscriptions() []SubscriptionState {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]SubscriptionState, len(c.subs))
	for i, s := range c.subs {
		out[i] = *s
		out[i].Scopes = maps.Clone(s.Scopes)
		out[i].Effective = maps.Clone(s.Effective)
	}
	return out
}

// Rows returns the table's rows, ordered by rowId, as the server last
// delivered them (queued commits are not applied to the replica).
func (c *Client) Rows(table string) []Row { return c.rep.rows(table) }

// Row returns one row.
func (c *Client) Row(table, rowID string) (Row, bool) { return c.rep.row(table, rowID) }

// Count returns the number of rows the replica holds for table.
func (c *Client) Count(table string) int { return c.rep.count(table) }

// Version returns the row's last-known serverVersion, 0 when the replica
// does not hold it.
func (c *Client) Version(table, rowID string) int64 { return c.rep.version(table, rowID) }
