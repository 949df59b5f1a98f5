package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/storage"
)

var projects = []string{"p0", "p1", "p2", "p3", "p4", "p5"}

// actor is one token holder whose grant the test re-draws.
type actor struct {
	name   string
	grants [2][]string // per phase
	phase  atomic.Int32
	toks   [2]string
}

func (a *actor) token(context.Context) (string, error) { return a.toks[a.phase.Load()], nil }

func (a *actor) everGranted(p string) bool {
	return slices.Contains(a.grants[0], p) || slices.Contains(a.grants[1], p)
}

func subset(rnd *rand.Rand, min, max int) []string {
	n := min + rnd.IntN(max-min+1)
	out := slices.Clone(projects)
	rnd.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	out = out[:n]
	slices.Sort(out)
	return out
}

// reader is an actor that only reads: either one subscription per wanted
// project, or one subscription over all of them.
type reader struct {
	*actor
	c      *client.Client
	wanted []string
	perSub bool
}

// TestScopeIsolation: writers and readers with random grants sync
// concurrently; half way every grant is re-drawn. At the end no replica
// holds a row of a project its actor was never granted, every replica
// holds exactly the server's rows of the projects it wants and still
// holds, and a reader with one subscription per project holds nothing
// else (revocation purges); one with a subscription over several may
// keep rows of projects it lost (narrowing purges nothing, SPEC.md §3.3).
func TestScopeIsolation(t *testing.T) {
	onBothStores(t, func(t *testing.T, st store) {
		for run := range pick(1, 10) {
			t.Run(fmt.Sprint("run", run), func(t *testing.T) { scopeRun(t, startNode(t, st, nil)) })
		}
	})
}

func scopeRun(t *testing.T, n *node.Node) {
	ctx := context.Background()
	rnd := newRand(t)
	sch := mustSchema(t)
	newActor := func(name string) *actor {
		a := &actor{name: name}
		for ph := range 2 {
			a.grants[ph] = subset(rnd, 1, 3)
			a.toks[ph] = token(t, name, "iso", a.grants[ph]...)
		}
		return a
	}
	newClient := func(a *actor) *client.Client {
		c, err := client.New(client.Config{BaseURL: n.URL(), TokenFunc: a.token, Schema: sch})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var writers []*actor
	var wclients []*client.Client
	for i := range 3 {
		a := newActor(fmt.Sprint("writer-", i))
		writers, wclients = append(writers, a), append(wclients, newClient(a))
	}
	var readers []*reader
	for i := range 5 {
		r := &reader{actor: newActor(fmt.Sprint("reader-", i)), wanted: subset(rnd, 2, 4), perSub: i%2 == 0}
		r.c = newClient(r.actor)
		if r.perSub {
			for _, p := range r.wanted {
				if err := r.c.Subscribe("sub-"+p, "items", map[string][]string{"project_id": {p}}); err != nil {
					t.Fatal(err)
				}
			}
		} else if err := r.c.Subscribe("all", "items", map[string][]string{"project_id": r.wanted}); err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	seeds := make([]uint64, len(writers)+len(readers))
	for i := range seeds {
		seeds[i] = rnd.Uint64()
	}
	ops := pick(40, 400)

	for phase := range 2 {
		for _, a := range writers {
			a.phase.Store(int32(phase))
		}
		for _, r := range readers {
			r.phase.Store(int32(phase))
			// A client stops pulling a revoked subscription (SPEC.md
			// §3.3); the app registers it again when its grant changes.
			for _, sub := range r.c.Subscriptions() {
				if sub.Status == "revoked" {
					r.c.Unsubscribe(sub.ID)
					if err := r.c.Subscribe(sub.ID, sub.Table, sub.Scopes); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		var wg sync.WaitGroup
		for i, w := range writers {
			wg.Go(func() { write(t, w, wclients[i], rand.New(rand.NewPCG(seeds[i], uint64(phase))), phase, ops) })
		}
		for i, r := range readers {
			wg.Go(func() {
				rr := rand.New(rand.NewPCG(seeds[len(writers)+i], uint64(phase)))
				for range 1 + rr.IntN(4) {
					if _, err := r.c.Sync(ctx); err != nil {
						t.Errorf("%s: %v", r.name, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	for i, c := range wclients {
		if _, err := c.SyncUntilIdle(ctx); err != nil {
			t.Fatalf("%s: %v", writers[i].name, err)
		}
	}

	server := serverRows(t, n.Store)
	for id := range server {
		if strings.HasPrefix(id, "forbidden-") {
			t.Fatalf("the server holds %s, written outside its writer's grant", id)
		}
	}
	for _, r := range readers {
		if _, err := r.c.SyncUntilIdle(ctx); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		now := r.grants[1]
		for _, row := range r.c.Rows("items") {
			p, _ := row.Values["project_id"].(string)
			if !r.everGranted(p) || !slices.Contains(r.wanted, p) {
				t.Fatalf("%s (granted %v then %v, wants %v) holds %s of %s", r.name, r.grants[0], r.grants[1], r.wanted, row.ID, p)
			}
			if r.perSub && !slices.Contains(now, p) {
				t.Fatalf("%s lost %s but still holds its row %s (revocation purges)", r.name, p, row.ID)
			}
		}
		for id, want := range server {
			if !slices.Contains(now, want.project) || !slices.Contains(r.wanted, want.project) {
				continue
			}
			got, ok := r.c.Row("items", id)
			if !ok {
				t.Fatalf("%s (granted %v then %v, wants %v) lacks %s of %s", r.name, r.grants[0], r.grants[1], r.wanted, id, want.project)
			}
			if got.Version != want.version {
				t.Fatalf("%s holds %s at version %d, the server at %d", r.name, id, got.Version, want.version)
			}
		}
		for _, row := range r.c.Rows("items") {
			want, ok := server[row.ID]
			p, _ := row.Values["project_id"].(string)
			if slices.Contains(now, p) && !ok {
				t.Fatalf("%s holds %s of %s, deleted on the server", r.name, row.ID, p)
			}
			if ok && slices.Contains(now, p) && row.Values["body"] != want.body {
				t.Fatalf("%s holds %s with body %v, the server %q", r.name, row.ID, row.Values["body"], want.body)
			}
		}
	}
}

// write makes ops random writes as w: inserts, updates and deletes in
// projects it holds, and now and then an attempt in a project it never
// holds, syncing now and then.
func write(t *testing.T, w *actor, c *client.Client, rnd *rand.Rand, phase, ops int) {
	ctx := context.Background()
	grant := w.grants[phase]
	var mine []string
	for i := range ops {
		var op client.Op
		switch k := rnd.IntN(10); {
		case k == 0:
			var never []string
			for _, p := range projects {
				if !w.everGranted(p) {
					never = append(never, p)
				}
			}
			if len(never) == 0 {
				continue
			}
			id := fmt.Sprintf("forbidden-%s-%d-%d", w.name, phase, i)
			op = client.Upsert("items", item(id, never[rnd.IntN(len(never))], "forbidden"))
		case k <= 2 && len(mine) > 0:
			j := rnd.IntN(len(mine))
			op = client.Delete("items", mine[j])
			mine = slices.Delete(mine, j, j+1)
		case k <= 5 && len(mine) > 0:
			id := mine[rnd.IntN(len(mine))]
			row, ok := c.Row("items", id)
			if !ok {
				continue
			}
			p, _ := row.Values["project_id"].(string)
			op = client.Upsert("items", item(id, p, fmt.Sprintf("update %d of %s", i, w.name)))
		default:
			id := fmt.Sprintf("%s-%d-%d", w.name, phase, i)
			op = client.Upsert("items", item(id, grant[rnd.IntN(len(grant))], "insert"))
			mine = append(mine, id)
		}
		if _, err := c.Commit(ctx, op); err != nil {
			t.Errorf("%s: commit: %v", w.name, err)
			return
		}
		if rnd.IntN(4) == 0 {
			if _, err := c.Sync(ctx); err != nil {
				t.Errorf("%s: %v", w.name, err)
				return
			}
		}
	}
}

func item(id, project, body string) map[string]any {
	return map[string]any{"id": id, "project_id": project, "body": body, "n": nil, "score": nil, "weight": 1.0}
}

type serverRow struct {
	project, body string
	version       int64
}

// serverRows reads every items row of the partition.
func serverRows(t *testing.T, st storage.Store) map[string]serverRow {
	t.Helper()
	ctx := context.Background()
	sch := mustSchema(t)
	items, _ := sch.Table("items")
	out := map[string]serverRow{}
	err := st.ReadTx(ctx, func(tx storage.ReadTx) error {
		rows, err := tx.RowScan(ctx, storage.ScanParams{Partition: "iso", Table: "items", Scopes: map[string][]string{"project_id": projects}, Limit: storage.MaxScanLimit})
		if err != nil {
			return err
		}
		for _, r := range rows {
			vals, err := items.Codec.DecodeRow(r.Payload, nil)
			if err != nil {
				return err
			}
			out[r.RowID] = serverRow{project: string(vals[1].Bytes), body: string(vals[2].Bytes), version: r.ServerVersion}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
