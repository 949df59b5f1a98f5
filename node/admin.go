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

// AdminOptions say how an operator command reaches a node's NATS.
type AdminOptions struct {
	// NATSURL is the NATS to write tokens and events to (default: the
	// first of Config.NATS.URLs in external mode, else the embedded
	// server's client address on loopback).
	NATSURL string
	// NoNATS changes SQL only: running nodes still refuse in SQL, and
	// the tokens can be republished later.
	NoNATS bool
}

// adminTimeout bounds connecting to NATS and binding the gate bucket:
// an operator command should fall back to SQL quickly.
const adminTimeout = 5 * time.Second

// Admin is what an operator command opens on a node's data: its store, a
// serve gate at the stored schema version, and — when reachable — the
// node's NATS, so that gate changes reach running nodes at once. It is a
// resource: Close releases it.
type Admin struct {
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

// OpenAdmin opens the store cfg selects (which must already hold a
// schema: a SQLite file must exist), connects to the node's NATS unless
// opts.NoNATS, and binds a gate named "syncnode-cli" in cfg.Names. A NATS
// that cannot be reached leaves the admin on SQL alone, with a warning.
func OpenAdmin(ctx context.Context, cfg Config, opts AdminOptions) (*Admin, error) {
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
	a := &Admin{Store: st, SchemaVersion: m.Version}
	gc := gate.Config{Store: st, Schema: &schema.Schema{Version: m.Version}, Names: cfg.Names, Node: "syncnode-cli",
		Clock: cfg.Clock, Logger: cfg.Logger.With("component", "gate")}
	if !opts.NoNATS {
		url := opts.NATSURL
		if url == "" {
			url = adminNATSURL(cfg.NATS)
		}
		if err := a.connect(ctx, url, cfg.Logger); err != nil {
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
		bctx, cancel := context.WithTimeout(ctx, adminTimeout)
		defer cancel()
		if err := a.Gate.Bind(bctx); err != nil {
			a.Warnings = append(a.Warnings, fmt.Sprintf("serve-gate bucket unavailable (%v): changing SQL only", err))
			a.NATSURL = ""
		}
	}
	return a, nil
}

func (a *Admin) connect(ctx context.Context, url string, logger *slog.Logger) error {
	s, err := embedded.New(embedded.Config{Mode: embedded.ModeExternal, URLs: []string{url}, ClientName: "syncnode-cli",
		ReadyTimeout: adminTimeout, Logger: logger.With("component", "nats")})
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
func (a *Admin) Close() error {
	var errs []error
	if a.nats != nil {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		errs = append(errs, a.nats.Stop(ctx))
	}
	errs = append(errs, a.Store.Close())
	return errors.Join(errs...)
}

// adminNATSURL is where a node's NATS listens: the first external URL,
// or the embedded server's client port (nats.conf's, or the override) on
// loopback.
func adminNATSURL(c embedded.Config) string {
	if c.Mode == embedded.ModeExternal && len(c.URLs) > 0 {
		return c.URLs[0]
	}
	port := embedded.DefaultPort
	if opts, err := embedded.LoadOptions(c); err == nil && opts.Port > 0 {
		port = opts.Port
	}
	return "nats://" + embedded.DefaultHost + ":" + strconv.Itoa(port)
}
