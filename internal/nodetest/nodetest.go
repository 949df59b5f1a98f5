// Package nodetest starts real nodes for the tests of the packages a node
// assembles (admin, hooks): a SQLite store in t.TempDir(), an embedded
// NATS server on a random port, HTTP on a random loopback port, and Go
// clients that sync against it.
package nodetest

import (
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/syncnode/syncnode/auth"
	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/schema"
)

// SchemaJSON has one table, todos, scoped by project_id.
const SchemaJSON = `{"version": 1, "tables": [
 {"name": "todos", "primaryKey": "id", "scopes": ["project:{project_id}"],
  "columns": [
   {"name": "id", "type": "string"},
   {"name": "project_id", "type": "string"},
   {"name": "title", "type": "string"},
   {"name": "done", "type": "boolean"}]}]}`

// Secret signs the tokens of Token (HS256).
var Secret = []byte("nodetest-secret-nodetest-secret-0123456789")

// Schema parses SchemaJSON.
func Schema(t testing.TB) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(SchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Start starts a node and stops it at cleanup. mod edits the
// configuration first.
func Start(t testing.TB, mod func(*node.Config)) *node.Node {
	t.Helper()
	n, err := node.New(Config(t, mod))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("stop node: %v", err)
		}
	})
	return n
}

// Config is the configuration Start starts a node with, mod applied.
func Config(t testing.TB, mod func(*node.Config)) node.Config {
	t.Helper()
	v, err := auth.NewVerifier(auth.Config{Secret: Secret})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{
		DataDir: t.TempDir(),
		Schema:  Schema(t),
		Name:    "test-node",
		Admin:   node.AdminConfig{Version: "1.2.3"},
		HTTP:    node.HTTPConfig{Listen: "127.0.0.1:0"},
		NATS:    embedded.Config{Port: embedded.RandomPort, Host: "127.0.0.1"},
		API:     httpapi.Config{Auth: httpapi.BearerAuth(v)},
		Logger:  slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

// Token mints a token for actor in partition holding scopes.
func Token(t testing.TB, actor, partition string, scopes map[string][]string) string {
	t.Helper()
	tok, err := auth.Mint(Secret, auth.Principal{ActorID: actor, Partition: partition, Scopes: scopes}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Client returns a client of n sending token.
func Client(t testing.TB, n *node.Node, token string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: n.URL(), Token: token, Schema: Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Todo is a row of todos.
func Todo(id, project, title string) map[string]any {
	return map[string]any{"id": id, "project_id": project, "title": title, "done": false}
}

// TamperURL changes one character of a signed URL's st= token, in its
// MAC: the URL a node must refuse as tampered.
func TamperURL(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	tok := []byte(q.Get("st"))
	if len(tok) < 5 {
		t.Fatalf("TamperURL: %q has no signed-URL token", raw)
	}
	i := len(tok) - 5
	if tok[i] == 'A' {
		tok[i] = 'B'
	} else {
		tok[i] = 'A'
	}
	q.Set("st", string(tok))
	u.RawQuery = q.Encode()
	return u.String()
}
