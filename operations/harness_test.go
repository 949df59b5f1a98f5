package operations

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/pgstore/pgtest"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// testSchema has two scoped tables of every result type the tests read.
const testSchema = `{"version":1,"tables":[
 {"name":"tasks","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
  {"name":"id","type":"string"},
  {"name":"project_id","type":"string"},
  {"name":"title","type":"string","nullable":true},
  {"name":"prio","type":"integer"},
  {"name":"done","type":"boolean"},
  {"name":"meta","type":"json","nullable":true}]},
 {"name":"notes","primaryKey":"id","scopes":["user:{user_id}"],"columns":[
  {"name":"id","type":"string"},
  {"name":"user_id","type":"string"},
  {"name":"body","type":"string"}]}]}`

func parseSchema(t testing.TB) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stores are the two stores every execution test runs on.
var stores = map[string]func(t testing.TB) storage.Store{
	"sqlite": func(t testing.TB) storage.Store {
		st, err := sqlitestore.Open(context.Background(), sqlitestore.Config{Path: filepath.Join(t.TempDir(), "sync.db"), Synchronous: sqlitestore.SynchronousNormal})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	},
	"postgres": func(t testing.TB) storage.Store {
		url, sch := pgtest.Schema(t)
		st, err := pgstore.Open(context.Background(), pgstore.Config{URL: url, Schema: sch})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	},
}

// env is an engine and an operations service over one store.
type env struct {
	t      testing.TB
	ctx    context.Context
	schema *schema.Schema
	store  storage.Store
	engine *engine.Engine
	svc    *Service
}

func newEnv(t testing.TB, open func(testing.TB) storage.Store, f File, mod func(*engine.Config)) *env {
	t.Helper()
	ctx := context.Background()
	sc := parseSchema(t)
	st := open(t)
	if err := st.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{Schema: sc, Store: st}
	if mod != nil {
		mod(&cfg)
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(ctx, sc, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Prepare(ctx, st); err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{Schema: sc, Store: st, Engine: e, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, schema: sc, store: st, engine: e, svc: svc}
}

// put writes rows into a partition as one authoritative commit.
func (e *env) put(partition string, muts ...Mutation) int64 {
	e.t.Helper()
	ops, err := e.svc.operations(muts)
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.engine.PushAuthoritative(e.ctx, engine.AuthoritativeCommit{
		Partition: partition, ActorID: "seeder", ClientID: "seeder", ClientCommitID: randomID(),
		Operations: func(context.Context, storage.Tx) ([]ssp2.Operation, error) { return ops, nil },
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return res.CommitSeq
}

func task(id, project, title string, prio int64, done bool) Mutation {
	return Mutation{Op: "upsert", Table: "tasks", Row: map[string]any{"id": id, "project_id": project, "title": title, "prio": prio, "done": done, "meta": nil}}
}

var idSeq atomic.Int64

func randomID() string { return fmt.Sprintf("c%d", idSeq.Add(1)) }

// caller is an identity granted scopes.
func caller(partition, actor string, allowed engine.Allowed) engine.Identity {
	return engine.Identity{Partition: partition, ActorID: actor, Scopes: engine.StaticScopes(allowed)}
}

func forEachStore(t *testing.T, fn func(t *testing.T, open func(testing.TB) storage.Store)) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) { fn(t, stores[name]) })
	}
}
