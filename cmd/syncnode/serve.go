package main

import (
	"context"
	"crypto"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/loadfix"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/rules"
	"github.com/syncnode/syncnode/schema"
)

// runServe runs a node until ctx is cancelled (SIGINT/SIGTERM), then shuts
// it down cleanly: in-flight requests finish, the relay flushes, NATS and
// the store close. Every acknowledged commit is already durable in SQL.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg, err := parseServeFlags(fs, args, os.Getenv)
	if err != nil {
		if isHelp(err) {
			return nil
		}
		return err
	}
	testMode := cfg.TestMode.TestControl || cfg.TestMode.LoadFixture
	if testMode {
		if err := checkLoopback(cfg.HTTP.Listen); err != nil {
			return err
		}
	}
	log := newLogger(stderr, cfg.Log)
	if testMode {
		warnTestModes(stderr, cfg.TestMode)
	}
	cfg.Runtime.apply(log, os.Getenv)
	if _, err := cfg.Runtime.startPprof(ctx, log); err != nil {
		return err
	}

	sch, err := loadSchema(cfg.Schema)
	if cfg.TestMode.LoadFixture {
		sch, err = loadfix.Schema(), nil
	}
	if err != nil {
		return err
	}
	validators, commitValidator, err := loadRules(cfg.Validators, sch)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	var (
		authn    httpapi.Authenticator = loadfix.Auth()
		devToken string
	)
	switch {
	case cfg.Hooks.Token.Enabled:
		authn = nil // the token hook verifies bearer tokens
	case cfg.TestMode.LoadFixture:
	case testMode && !cfg.Auth.configured():
		// The control API authenticates its instances by header; the
		// node's own routes take only configured tokens, and a test mode
		// never mints a development secret or token.
		authn = refuseAll
	default:
		if authn, devToken, err = buildAuth(cfg, time.Now()); err != nil {
			return err
		}
	}

	ncfg, err := cfg.node()
	if err != nil {
		return err
	}
	ncfg.Schema, ncfg.Logger, ncfg.API.Auth = sch, log, authn
	ncfg.Engine.Validators, ncfg.Engine.CommitValidator = validators, commitValidator
	if ncfg.Reactions, err = cfg.Reactions.node(sch); err != nil {
		return err
	}
	if testMode {
		ncfg.Routes = testModeRoutes(cfg.TestMode, ncfg, log)
	}
	n, err := node.New(ncfg)
	if err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	storeDesc := "SQLite " + filepath.Join(cfg.DataDir, "syncnode.db")
	if cfg.Storage.PostgresURL != "" {
		storeDesc = "PostgreSQL"
	}
	log.Info("syncnode started", "version", buildVersion(), "http", n.URL(), "nats", n.NATS.ClientURL(),
		"storage", storeDesc, "schemaVersion", sch.Version, "tables", len(sch.Tables), "admin", cfg.Admin.Enabled, "hooks", n.Hooks.Names())
	if devToken != "" {
		fmt.Fprintf(stderr, `
WARNING: development authentication. No auth.jwt_secret or public key is
configured, so this node signs tokens with a secret generated into
%s. Do not expose it. A token for actor "dev" in partition
"dev" holding every project:
  %s
Mint others with: syncnode client token --data %s --actor A --partition P --scope project_id=p1

`, filepath.Join(cfg.DataDir, "dev-jwt-secret"), devToken, cfg.DataDir)
	}
	fmt.Fprintf(stdout, "syncnode: listening on %s\n", n.URL())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-n.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.HTTP.ShutdownTimeout.Duration)
	defer cancel()
	stopErr := n.Stop(sctx)
	if serveErr != nil {
		return fmt.Errorf("http server: %w", serveErr)
	}
	return stopErr
}

// refuseAll authenticates nobody: 401 sync.auth_required.
var refuseAll = httpapi.AuthenticatorFunc(func(*http.Request) (engine.Identity, error) {
	return engine.Identity{}, errors.New("no authentication is configured on this test-mode node")
})

// configured reports whether a JWT secret or public key is set.
func (a authConfig) configured() bool {
	return a.JWTSecret != "" || a.JWTSecretFile != "" || len(a.JWTPublicKeyFiles) > 0
}

// buildAuth returns the request authenticator: JWTs verified with the
// configured secret or public keys, or — with neither configured —
// development auth with a secret generated into the data dir, plus a token
// to print.
func buildAuth(cfg config, now time.Time) (httpapi.Authenticator, string, error) {
	acfg := auth.Config{Issuer: cfg.Auth.Issuer, Audience: cfg.Auth.Audience}
	switch {
	case cfg.Auth.JWTSecret != "":
		acfg.Secret = []byte(cfg.Auth.JWTSecret)
	case cfg.Auth.JWTSecretFile != "":
		b, err := os.ReadFile(cfg.Auth.JWTSecretFile)
		if err != nil {
			return nil, "", fmt.Errorf("auth.jwt_secret_file: %w", err)
		}
		acfg.Secret = []byte(strings.TrimSpace(string(b)))
	}
	for _, p := range cfg.Auth.JWTPublicKeyFiles {
		k, err := auth.LoadPublicKey(p)
		if err != nil {
			return nil, "", fmt.Errorf("auth.jwt_public_key_files: %w", err)
		}
		acfg.PublicKeys = append(acfg.PublicKeys, crypto.PublicKey(k))
	}
	devToken := ""
	if len(acfg.Secret) == 0 && len(acfg.PublicKeys) == 0 {
		secret, _, err := auth.DevSecret(cfg.DataDir)
		if err != nil {
			return nil, "", err
		}
		acfg.Secret = secret
		devToken, err = auth.Mint(secret, auth.Principal{ActorID: "dev", Partition: "dev", Scopes: map[string][]string{"project_id": {"*"}}}, 30*24*time.Hour, now)
		if err != nil {
			return nil, "", err
		}
	}
	v, err := auth.NewVerifier(acfg)
	if err != nil {
		return nil, "", err
	}
	return httpapi.BearerAuth(v), devToken, nil
}

func newLogger(w io.Writer, c logConfig) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// loadRules compiles the rules file, if one is configured, against the
// served schema.
func loadRules(path string, sch *schema.Schema) (map[string]engine.RowValidator, engine.CommitValidator, error) {
	if path == "" {
		return nil, nil, nil
	}
	set, err := rules.Load(path)
	if err != nil {
		return nil, nil, fmt.Errorf("validators: %w", err)
	}
	rows, commit, err := set.Compile(sch)
	if err != nil {
		return nil, nil, fmt.Errorf("validators %s: %w", path, err)
	}
	return rows, commit, nil
}
