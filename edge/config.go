package edge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/bus"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
)

// HubHome is the home a partition rule names for the hub itself.
const HubHome = "hub"

// Defaults.
const (
	DefaultPingInterval   = 250 * time.Millisecond
	DefaultRequestTimeout = 2 * time.Second
	DefaultForwardWait    = 2 * time.Second
	DefaultPageCommits    = 500
	// maxPageCommits bounds a page: storage.MaxCommitRangeLimit.
	maxPageCommits = storage.MaxCommitRangeLimit
)

// Config configures the edge side (Home) or the hub side (Hub) of the
// topology. The settings are the operator's; the wiring fields are set by
// the node.
type Config struct {
	// Name makes this node the edge of that name: its JetStream domain
	// must be the name and its embedded server a leaf of the hub's. Empty
	// on the hub.
	Name string
	// Homes maps partitions to their home: an exact partition id, or a
	// prefix ending in '*', to an edge name or "hub". The longest
	// matching rule wins; a partition no rule matches is the hub's. The
	// hub and every edge share one table.
	Homes map[string]string
	// PingInterval paces the hub's status requests to each edge: how soon
	// a returning link is noticed, and the replica's polling floor
	// (default 250ms).
	PingInterval time.Duration
	// RequestTimeout bounds one request to an edge (default 2s).
	RequestTimeout time.Duration
	// ForwardWait bounds how long a forwarded push waits for the replica
	// to apply the commits the edge just accepted, so the same round's
	// pull sees them (default 2s; past it the round answers without).
	ForwardWait time.Duration
	// PageCommits is the number of commits per replication request
	// (default 500, at most 10,000); a page that exceeds the server's
	// max_payload is split.
	PageCommits int

	// Wiring, set by the node.
	Conn      *nats.Conn
	JetStream jetstream.JetStream
	Store     storage.Store
	Schema    *schema.Schema
	Names     bus.Names
	// Engine runs forwarded pushes (edge side).
	Engine *engine.Engine
	// OnApply is called after the replica applied commits of a partition
	// (hub side): the relay's wake-up, which publishes them on the hub.
	OnApply func(partition string)
	// Blobs stores the blobs the replica's rows reference, read from the
	// edge's Object Store (hub side; nil: a replicated row referencing a
	// blob fails, and the replica stops).
	Blobs BlobPutter
	// OnReset is called after the replica of a partition was dropped and
	// registered under the edge's new log epoch (hub side): the serve
	// gate's change hook, which answers the hub's realtime sessions of the
	// partition with reset-required.
	OnReset func(ctx context.Context, partition string)
	// Replicas of the hub's source streams.
	Replicas int
	Logger   *slog.Logger
}

// WithDefaults returns c with unset fields defaulted.
func (c Config) WithDefaults() Config {
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.ForwardWait == 0 {
		c.ForwardWait = DefaultForwardWait
	}
	if c.PageCommits == 0 {
		c.PageCommits = DefaultPageCommits
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("edge config: "+format, args...)) }
	if c.Name != "" {
		if err := bus.CheckEdge(c.Name); err != nil {
			bad("Name: %v", err)
		}
	}
	if _, err := ParseHomes(c.Homes); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"PingInterval", c.PingInterval}, {"RequestTimeout", c.RequestTimeout}, {"ForwardWait", c.ForwardWait}} {
		if d.v < 0 {
			bad("%s %v must not be negative", d.name, d.v)
		}
	}
	if c.PageCommits < 0 || c.PageCommits > maxPageCommits {
		bad("PageCommits %d outside 1..%d", c.PageCommits, maxPageCommits)
	}
	return errors.Join(errs...)
}

// Enabled reports whether the node takes part in an edge topology: it is
// an edge, or a hub some partition is homed away from.
func (c Config) Enabled() bool { return c.Name != "" || len(c.Homes) > 0 }

// Homes says where each partition is homed. The zero Homes homes every
// partition at the hub.
type Homes struct {
	exact    map[string]string
	prefixes []prefixRule // longest prefix first
}

type prefixRule struct{ prefix, home string }

// ParseHomes builds Homes from rules (see Config.Homes).
func ParseHomes(rules map[string]string) (Homes, error) {
	h := Homes{exact: map[string]string{}}
	var errs []error
	for key, home := range rules {
		if home != HubHome {
			if err := bus.CheckEdge(home); err != nil {
				errs = append(errs, fmt.Errorf("edge config: Homes[%q]: %w", key, err))
				continue
			}
		}
		if p, ok := strings.CutSuffix(key, "*"); ok {
			h.prefixes = append(h.prefixes, prefixRule{p, home})
			continue
		}
		if key == "" {
			errs = append(errs, errors.New("edge config: Homes: an empty partition id"))
			continue
		}
		h.exact[key] = home
	}
	slices.SortFunc(h.prefixes, func(a, b prefixRule) int { return len(b.prefix) - len(a.prefix) })
	return h, errors.Join(errs...)
}

// Of returns the edge a partition is homed at, or "" for the hub.
func (h Homes) Of(partition string) string {
	home, ok := h.exact[partition]
	if !ok {
		for _, r := range h.prefixes {
			if strings.HasPrefix(partition, r.prefix) {
				home, ok = r.home, true
				break
			}
		}
	}
	if !ok || home == HubHome {
		return ""
	}
	return home
}

// Edges lists the edges any rule names, sorted.
func (h Homes) Edges() []string {
	var out []string
	add := func(home string) {
		if home != HubHome && !slices.Contains(out, home) {
			out = append(out, home)
		}
	}
	for _, home := range h.exact {
		add(home)
	}
	for _, r := range h.prefixes {
		add(r.home)
	}
	slices.Sort(out)
	return out
}
