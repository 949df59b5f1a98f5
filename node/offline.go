package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/gate"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
)

// OfflineOptions say how an offline operator command reaches a node's
// NATS.
type OfflineOptions struct {
	// NATSURL is the NATS to write tokens and events to (default
	// NATSURL(Config.NATS)).
	NATSURL string
	// User and Password, or CredentialsFile, authenticate to it (the
	// operator user of docs/bus.md).
	User, Password, CredentialsFile string
	// NoNATS changes SQL only: running nodes still refuse in SQL, and
	// the tokens can be republished later.
	NoNATS bool
}

// offlineTimeout bounds connecting to NATS and binding the gate bucket:
// an operator command should fall back to SQL quickly.
const offlineTimeout = 5 * time.Second

// Offline is what an offline operator command opens on a node's data: its
// store, a serve gate at the stored schema version, and — when reachable
// — the node's NATS, so that gate changes reach running nodes at once
// (admin.New over Store and Gate serves the admin API on it). It is a
// resource: Close releases it.
type Offline struct {
	Store storage.Store
	Gate  *gate.Gate
	// SchemaVersion is the stored schema version.
	SchemaVersion int32
	// NATSURL is the NATS the admin connected to, "" when it runs on SQL
	// alone (NoNATS, or NATS unreachable: see Warnings).
	NATSURL string
	// Warnings say why the admin fell back to SQL alone.
	Warnings []string

	nats *embedded.Server
}

// OpenOffline opens the store cfg selects (which must already hold a
// schema: a SQLite file must exist), connects to the node's NATS unless
// opts.NoNATS, and binds a gate named "syncnode-cli" in cfg.Names. A NATS
// that cannot be reached leaves it on SQL alone, with a warning.
func OpenOffline(ctx context.Context, cfg Config, opts OfflineOptions) (*Offline, error) {
	cfg = cfg.WithDefaults()
	if !cfg.Store.isPostgres() {
		if _, err := os.Stat(cfg.Store.SQLite.Path); err != nil {
			return nil, fmt.Errorf("no database at %s (set --data or --postgres): %w", cfg.Store.SQLite.Path, err)
		}
	}
	st, err := OpenStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	m, ok, err := st.SchemaMarker(ctx)
	if err == nil && !ok {
		err = errors.New("no schema is installed: start a node first")
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	a := &Offline{Store: st, SchemaVersion: m.Version}
	gc := gate.Config{Store: st, Schema: &schema.Schema{Version: m.Version}, Names: cfg.Names, Node: "syncnode-cli",
		Clock: cfg.Clock, Logger: cfg.Logger.With("component", "gate")}
	if !opts.NoNATS {
		url := opts.NATSURL
		if url == "" {
			url = NATSURL(cfg.NATS)
		}
		if err := a.connect(ctx, url, opts, cfg.Logger); err != nil {
			a.Warnings = append(a.Warnings, fmt.Sprintf("NATS at %s unreachable (%v): changing SQL only; run \"syncnode checkpoints republish\" once it is back", url, err))
		} else {
			gc.Conn, gc.JetStream = a.nats.Conn(), a.nats.JetStream()
		}
	}
	if a.Gate, err = gate.New(gc); err != nil {
		a.Close()
		return nil, err
	}
	if a.nats != nil {
		bctx, cancel := context.WithTimeout(ctx, offlineTimeout)
		defer cancel()
		if err := a.Gate.Bind(bctx); err != nil {
			a.Warnings = append(a.Warnings, fmt.Sprintf("serve-gate bucket unavailable (%v): changing SQL only", err))
			a.NATSURL = ""
		}
	}
	return a, nil
}

func (a *Offline) connect(ctx context.Context, url string, opts OfflineOptions, logger *slog.Logger) error {
	s, err := embedded.New(embedded.Config{Mode: embedded.ModeExternal, URLs: []string{url}, ClientName: "syncnode-cli",
		User: opts.User, Password: opts.Password, CredentialsFile: opts.CredentialsFile,
		ReadyTimeout: offlineTimeout, Logger: logger.With("component", "nats")})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	a.nats, a.NATSURL = s, url
	return nil
}

// Close drains the NATS connection and closes the store.
func (a *Offline) Close() error {
	var errs []error
	if a.nats != nil {
		ctx, cancel := context.WithTimeout(context.Background(), offlineTimeout)
		defer cancel()
		errs = append(errs, a.nats.Stop(ctx))
	}
	errs = append(errs, a.Store.Close())
	return errors.Join(errs...)
}

// NATSURL is where a node's NATS listens: the first external URL, or the
// embedded server's client port (nats.conf's, or the override) on
// loopback. Operator commands connect there.
func NATSURL(c embedded.Config) string {
	if c.Mode == embedded.ModeExternal && len(c.URLs) > 0 {
		return c.URLs[0]
	}
	port := embedded.DefaultPort
	if opts, err := embedded.LoadOptions(c); err == nil && opts.Port > 0 {
		port = opts.Port
	}
	return "nats://" + embedded.DefaultHost + ":" + strconv.Itoa(port)
}
