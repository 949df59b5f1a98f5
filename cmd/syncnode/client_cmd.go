package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

const clientUsage = `Usage:
  syncnode client token --actor A --partition P --scope VAR=V1[,V2] [--ttl 24h] [--secret S | --data DIR]
      print a development JWT (HS256) for actor A in partition P
  syncnode client push --url U --token T --table T (--json ROW [--patch] | --delete ROWID) [--base-version N] [--state FILE] [--schema FILE] [--wire 3|2]
      queue one write and push it; with --state, unsent writes survive and are replayed next time;
      --patch writes only the columns --json names
  syncnode client pull --url U --token T --table T --scope VAR=V1[,V2] [--state FILE] [--schema FILE] [--wire 3|2]
      pull a table and print its rows as JSON lines {"rowId","version","values"}
  syncnode client watch --url U --token T --table T --scope VAR=V1[,V2] [--json] [--state FILE] [--schema FILE] [--wire 3|2]
      print a table's rows, then every change as it happens, over the realtime socket, until interrupted:
      one line per row ("row ID vN {values}", then "upsert ID vN {values}" or "delete ID");
      --json prints {"op":"row"|"upsert"|"delete","rowId","version","values"} lines

--url and --token default to $SYNCNODE_URL and $SYNCNODE_TOKEN; --schema to
the bundled example schema (tables tasks and notes). --wire picks the SSP2
wire version: 3 (the default) pushes only the columns a write changes and
reports conflicts per column; 2 pushes full rows.
`

// runClient dispatches the client subcommands.
func runClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, clientUsage)
		return errors.New("client: missing subcommand (token, push, pull or watch)")
	}
	switch args[0] {
	case "token":
		return runClientToken(args[1:], stdout, stderr)
	case "push":
		return runClientPush(ctx, args[1:], stdout, stderr)
	case "pull":
		return runClientPull(ctx, args[1:], stdout, stderr)
	case "watch":
		return runClientWatch(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, clientUsage)
		return nil
	default:
		fmt.Fprint(stderr, clientUsage)
		return fmt.Errorf("client: unknown subcommand %q", args[0])
	}
}

// scopeFlag collects repeated --scope VAR=V1,V2 flags.
type scopeFlag map[string][]string

func (s scopeFlag) String() string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strings.Join(s[k], ",")
	}
	return strings.Join(parts, " ")
}

func (s scopeFlag) Set(v string) error {
	name, vals, ok := strings.Cut(v, "=")
	if !ok || name == "" || vals == "" {
		return fmt.Errorf("want VAR=V1[,V2], got %q", v)
	}
	for _, x := range strings.Split(vals, ",") {
		if x == "" {
			return fmt.Errorf("empty value in %q", v)
		}
		s[name] = append(s[name], x)
	}
	return nil
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("client "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage of syncnode client %s:\n", name)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and refuses positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return nil
}

func runClientToken(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token", stderr)
	actor := fs.String("actor", "", "actor id (the token's sub)")
	part := fs.String("partition", "default", "partition")
	scopes := scopeFlag{}
	fs.Var(scopes, "scope", "allowed scope values VAR=V1[,V2] (repeatable; * allows any value)")
	ttl := fs.Duration("ttl", 24*time.Hour, "token lifetime")
	secret := fs.String("secret", "", "HS256 signing secret (at least 32 bytes)")
	dataDir := fs.String("data", "", "read the development secret from DIR/dev-jwt-secret (the node's data dir)")
	if err := parseFlags(fs, args); err != nil {
		return clientFlagErr(err)
	}
	if *actor == "" || *part == "" {
		return errors.New("client token: --actor and --partition are required")
	}
	if *ttl <= 0 {
		return errors.New("client token: --ttl must be positive")
	}
	key := []byte(*secret)
	switch {
	case *secret != "" && *dataDir != "":
		return errors.New("client token: give --secret or --data, not both")
	case *dataDir != "":
		b, err := os.ReadFile(filepath.Join(*dataDir, "dev-jwt-secret"))
		if err != nil {
			return fmt.Errorf("client token: read development secret: %w", err)
		}
		key = bytes.TrimSpace(b)
	case *secret == "":
		if s := os.Getenv("SYNCNODE_JWT_SECRET"); s != "" {
			key = []byte(s)
		} else {
			return errors.New("client token: give --secret, --data or $SYNCNODE_JWT_SECRET")
		}
	}
	if len(key) < 32 {
		return errors.New("client token: the secret must be at least 32 bytes")
	}
	tok, err := auth.Mint(key, auth.Principal{ActorID: *actor, Partition: *part, Scopes: scopes}, *ttl, time.Now())
	if err != nil {
		return fmt.Errorf("client token: %w", err)
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

// connFlags are the flags every networked client command takes.
type connFlags struct {
	url, token, state, schema *string
	wire                      *uint
}

func addConnFlags(fs *flag.FlagSet) connFlags {
	return connFlags{
		url:    fs.String("url", os.Getenv("SYNCNODE_URL"), "node URL, e.g. http://127.0.0.1:8080"),
		token:  fs.String("token", os.Getenv("SYNCNODE_TOKEN"), "bearer token (see: syncnode client token)"),
		state:  fs.String("state", "", "state file: client id, outbox, cursors and rows survive between runs"),
		schema: fs.String("schema", "", "schema IR file (default: the bundled example schema)"),
		wire:   fs.Uint("wire", client.DefaultWireVersion, "SSP2 wire version: 3 (sparse pushes, per-column conflicts) or 2 (full rows)"),
	}
}

// open builds the client the flags describe; mods edit its
// configuration last.
func (f connFlags) open(mods ...func(*client.Config)) (*client.Client, *schema.Schema, error) {
	if *f.url == "" || *f.token == "" {
		return nil, nil, errors.New("--url and --token are required (or $SYNCNODE_URL and $SYNCNODE_TOKEN)")
	}
	s, err := loadSchema(*f.schema)
	if err != nil {
		return nil, nil, err
	}
	if *f.wire != 2 && *f.wire != 3 {
		return nil, nil, fmt.Errorf("--wire %d: give 2 or 3", *f.wire)
	}
	cfg := client.Config{BaseURL: *f.url, Token: *f.token, Schema: s, WireVersion: uint16(*f.wire)}
	if *f.state != "" {
		cfg.Store = &client.FileStore{Path: *f.state}
	}
	for _, m := range mods {
		m(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return c, s, nil
}

// pushOutcome is one line of `client push` output.
type pushOutcome struct {
	ClientCommitID string         `json:"clientCommitId"`
	Status         string         `json:"status"`
	CommitSeq      int64          `json:"commitSeq,omitempty"`
	Code           string         `json:"code,omitempty"`
	Message        string         `json:"message,omitempty"`
	OpIndex        *int32         `json:"opIndex,omitempty"`
	ServerVersion  *int64         `json:"serverVersion,omitempty"`
	ServerRow      map[string]any `json:"serverRow,omitempty"`
	// ConflictColumns are the written columns that moved (wire version 3).
	ConflictColumns []string        `json:"conflictColumns,omitempty"`
	Details         json.RawMessage `json:"details,omitempty"`
}

func runClientPush(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("push", stderr)
	conn := addConnFlags(fs)
	table := fs.String("table", "", "table to write")
	rowJSON := fs.String("json", "", "the full row to upsert, as a JSON object")
	del := fs.String("delete", "", "rowId to delete")
	patch := fs.Bool("patch", false, "write only the columns --json names (with the primary key)")
	base := fs.Int64("base-version", -1, "baseVersion: fail unless the row is at this version (0: must not exist)")
	if err := parseFlags(fs, args); err != nil {
		return clientFlagErr(err)
	}
	c, _, err := conn.open()
	if err != nil {
		return fmt.Errorf("client push: %w", err)
	}
	if *rowJSON != "" || *del != "" {
		op, err := pushOp(*table, *rowJSON, *del, *base, *patch)
		if err != nil {
			return fmt.Errorf("client push: %w", err)
		}
		if _, err := c.Commit(ctx, op); err != nil {
			return fmt.Errorf("client push: %w", err)
		}
	} else if *conn.state == "" {
		return errors.New("client push: give --json or --delete (or --state to replay a saved outbox)")
	}
	res, err := c.SyncUntilIdle(ctx)
	enc := json.NewEncoder(stdout)
	rejected := map[string]*client.Rejection{}
	for _, r := range res.Rejected {
		rejected[r.ClientCommitID] = r
	}
	for _, p := range res.Pushed {
		if p.Retry {
			continue
		}
		out := pushOutcome{ClientCommitID: p.ClientCommitID, Status: p.Status.String(), CommitSeq: p.CommitSeq}
		if r := rejected[p.ClientCommitID]; r != nil {
			fillRejection(&out, r)
		}
		_ = enc.Encode(out)
	}
	for _, r := range res.Rejected {
		if r.Dropped {
			out := pushOutcome{ClientCommitID: r.ClientCommitID, Status: "dropped"}
			fillRejection(&out, r)
			_ = enc.Encode(out)
		}
	}
	if err != nil {
		if n := len(c.Pending()); n > 0 && *conn.state != "" {
			fmt.Fprintf(stderr, "syncnode: %d commit(s) stay queued in %s and are pushed by the next run\n", n, *conn.state)
		}
		return fmt.Errorf("client push: %w", err)
	}
	if len(res.Rejected) > 0 {
		return fmt.Errorf("client push: %w", res.Rejected[0])
	}
	return nil
}

func fillRejection(out *pushOutcome, r *client.Rejection) {
	op := r.OpIndex
	out.Code, out.Message, out.OpIndex, out.Details = string(r.Code), r.Message, &op, r.Details
	if r.Conflict != nil {
		v := r.Conflict.ServerVersion
		out.ServerVersion, out.ServerRow, out.ConflictColumns = &v, r.Conflict.ServerRow, r.Conflict.Columns
	}
}

// pushOp builds the operation of `client push`.
func pushOp(table, rowJSON, del string, base int64, patch bool) (client.Op, error) {
	if table == "" {
		return client.Op{}, errors.New("--table is required")
	}
	if (rowJSON == "") == (del == "") {
		return client.Op{}, errors.New("give exactly one of --json and --delete")
	}
	if patch && rowJSON == "" {
		return client.Op{}, errors.New("--patch needs --json")
	}
	var op client.Op
	if del != "" {
		op = client.Delete(table, del)
	} else {
		dec := json.NewDecoder(strings.NewReader(rowJSON))
		dec.UseNumber()
		var row map[string]any
		if err := dec.Decode(&row); err != nil || row == nil {
			return client.Op{}, fmt.Errorf("--json must be a JSON object: %v", err)
		}
		if dec.More() {
			return client.Op{}, errors.New("--json holds more than one value")
		}
		op = client.Upsert(table, row)
		if patch {
			op = client.Patch(table, row)
		}
	}
	if base >= 0 {
		op = op.WithBaseVersion(base)
	}
	return op, nil
}

func runClientPull(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("pull", stderr)
	conn := addConnFlags(fs)
	sub := addSubFlags(fs, "pull")
	if err := parseFlags(fs, args); err != nil {
		return clientFlagErr(err)
	}
	if err := sub.check(); err != nil {
		return fmt.Errorf("client pull: %w", err)
	}
	table, scopes := *sub.table, sub.scopes
	c, s, err := conn.open()
	if err != nil {
		return fmt.Errorf("client pull: %w", err)
	}
	t, err := sub.subscribe(c, s)
	if err != nil {
		return fmt.Errorf("client pull: %w", err)
	}
	res, err := c.SyncUntilIdle(ctx)
	if err != nil {
		return fmt.Errorf("client pull: %w", err)
	}
	if err := revokedErr(c, res); err != nil {
		return fmt.Errorf("client pull: %w", err)
	}
	enc := json.NewEncoder(stdout)
	for _, r := range c.Rows(table) {
		if rowInScopes(t, r, scopes) {
			if err := enc.Encode(r); err != nil {
				return fmt.Errorf("client pull: %w", err)
			}
		}
	}
	return nil
}

// revokedErr names the subscriptions the server answered revoked (SPEC.md
// §3.3): the token does not grant the requested scopes, so the pull
// printing nothing would look like an empty table.
func revokedErr(c *client.Client, res client.Result) error {
	if len(res.Revoked) == 0 {
		return nil
	}
	var msgs []string
	for _, s := range c.Subscriptions() {
		if slices.Contains(res.Revoked, s.ID) {
			reason := s.Reason
			if reason == "" {
				reason = string(ssp2.CodeScopeRevoked)
			}
			msgs = append(msgs, fmt.Sprintf("the subscription to %s within %s was revoked (%s): the token does not grant these scopes",
				s.Table, ssp2.CanonicalScopes(s.Scopes), reason))
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

// subFlags are the --table and --scope flags of a command that
// subscribes.
type subFlags struct {
	table  *string
	scopes scopeFlag
}

func addSubFlags(fs *flag.FlagSet, verb string) subFlags {
	f := subFlags{table: fs.String("table", "", "table to "+verb), scopes: scopeFlag{}}
	fs.Var(f.scopes, "scope", "requested scope values VAR=V1[,V2] (repeatable)")
	return f
}

func (f subFlags) check() error {
	if *f.table == "" || len(f.scopes) == 0 {
		return errors.New("--table and at least one --scope are required")
	}
	return nil
}

// subscribe subscribes c to the table within the scopes: one
// subscription per (table, scopes), named after them, so a state file
// resumes the same subscription on the next run.
func (f subFlags) subscribe(c *client.Client, s *schema.Schema) (*schema.Table, error) {
	table, scopes := *f.table, f.scopes
	t, ok := s.Table(table)
	if !ok {
		return nil, fmt.Errorf("unknown table %q", table)
	}
	sum := sha256.Sum256(append([]byte(table+"\x00"), ssp2.CanonicalScopes(scopes)...))
	if err := c.Subscribe("cli:"+table+":"+hex.EncodeToString(sum[:8]), table, scopes); err != nil {
		return nil, err
	}
	return t, nil
}

// runClientWatch is `client watch`: the rows of a table within scopes,
// then each change as the realtime session applies it (a delta, or a
// round after a wake-up or a reconnect), until ctx ends (SIGINT).
func runClientWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("watch", stderr)
	conn := addConnFlags(fs)
	sub := addSubFlags(fs, "watch")
	asJSON := fs.Bool("json", false, `print JSON lines {"op","rowId","version","values"}`)
	if err := parseFlags(fs, args); err != nil {
		return clientFlagErr(err)
	}
	if err := sub.check(); err != nil {
		return fmt.Errorf("client watch: %w", err)
	}
	table := *sub.table
	changed := make(chan struct{}, 1)
	c, s, err := conn.open(func(cfg *client.Config) {
		cfg.AppliedFunc = func(client.Result) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return fmt.Errorf("client watch: %w", err)
	}
	t, err := sub.subscribe(c, s)
	if err != nil {
		return fmt.Errorf("client watch: %w", err)
	}
	rt, err := c.NewRealtime(client.RealtimeConfig{
		Logger:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		StateFunc: func(st client.RealtimeStatus) { reportRealtime(stderr, st) },
	})
	if err != nil {
		return fmt.Errorf("client watch: %w", err)
	}
	if err := rt.Start(ctx); err != nil {
		return fmt.Errorf("client watch: %w", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = rt.Stop(sctx)
	}()
	if _, err := c.SyncUntilIdle(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("client watch: %w", err)
	}
	w := &watchPrinter{out: stdout, t: t, scopes: sub.scopes, json: *asJSON, seen: map[string]int64{}}
	if err := w.print(c.Rows(table), true); err != nil {
		return fmt.Errorf("client watch: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			if err := w.print(c.Rows(table), false); err != nil {
				return fmt.Errorf("client watch: %w", err)
			}
		}
	}
}

// reportRealtime tells the user when the socket is lost or comes back.
func reportRealtime(stderr io.Writer, st client.RealtimeStatus) {
	switch st.State {
	case client.RealtimeConnected:
		fmt.Fprintln(stderr, "syncnode: realtime connected")
	case client.RealtimeLost, client.RealtimeRefused:
		fmt.Fprintf(stderr, "syncnode: realtime %s (%s), retrying in %s\n", st.State, st.Reason, st.RetryDelay.Round(time.Millisecond))
	}
}

// watchPrinter prints what changed in the watched rows since it last
// looked: a row whose version moved, a row that left the scopes.
type watchPrinter struct {
	out    io.Writer
	t      *schema.Table
	scopes map[string][]string
	json   bool
	seen   map[string]int64 // rowId → version printed
}

// watchLine is one JSON line of `client watch`.
type watchLine struct {
	Op      string         `json:"op"`
	RowID   string         `json:"rowId"`
	Version int64          `json:"version,omitempty"`
	Values  map[string]any `json:"values,omitempty"`
}

func (w *watchPrinter) print(rows []client.Row, initial bool) error {
	op := "upsert"
	if initial {
		op = "row"
	}
	present := make(map[string]bool, len(rows))
	for _, r := range rows {
		if !rowInScopes(w.t, r, w.scopes) {
			continue
		}
		present[r.ID] = true
		if v, ok := w.seen[r.ID]; ok && v == r.Version {
			continue
		}
		w.seen[r.ID] = r.Version
		if err := w.line(watchLine{Op: op, RowID: r.ID, Version: r.Version, Values: r.Values}); err != nil {
			return err
		}
	}
	gone := make([]string, 0)
	for id := range w.seen {
		if !present[id] {
			gone = append(gone, id)
		}
	}
	sort.Strings(gone)
	for _, id := range gone {
		delete(w.seen, id)
		if err := w.line(watchLine{Op: "delete", RowID: id}); err != nil {
			return err
		}
	}
	return nil
}

func (w *watchPrinter) line(l watchLine) error {
	if w.json {
		return json.NewEncoder(w.out).Encode(l)
	}
	if l.Op == "delete" {
		_, err := fmt.Fprintf(w.out, "delete %s\n", l.RowID)
		return err
	}
	vals, err := json.Marshal(l.Values)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w.out, "%s %s v%d %s\n", l.Op, l.RowID, l.Version, vals)
	return err
}

// rowInScopes reports whether a row's scope columns hold requested
// values: the rows this pull asked for, not others the state file holds.
func rowInScopes(t *schema.Table, r client.Row, scopes map[string][]string) bool {
	for v, vals := range scopes {
		sc, ok := t.Scope(v)
		if !ok {
			return false
		}
		got := fmt.Sprint(r.Values[sc.Column])
		found := false
		for _, x := range vals {
			found = found || x == got
		}
		if !found {
			return false
		}
	}
	return true
}

// clientFlagErr turns -h into a clean exit.
func clientFlagErr(err error) error {
	if isHelp(err) {
		return nil
	}
	return err
}
