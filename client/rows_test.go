package client

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/syncnode/syncnode/schema"
)

// TestTableRowsBehaveAsAMap drives tableRows and a plain map with the same
// random operations — ordered appends as an image makes them, single puts
// and deletes as commits make them, scope purges, resets — and compares
// every read after each step, for a string and an integer primary key.
func TestTableRowsBehaveAsAMap(t *testing.T) {
	for _, pk := range []string{"string", "integer"} {
		t.Run(pk, func(t *testing.T) {
			s := mustSchema(t, `{"version":1,"tables":[{"name":"t","columns":[{"name":"id","type":"`+pk+`"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["p:{p}"]}]}`)
			tbl, _ := s.Table("t")
			testTableRows(t, tbl, pk == "integer")
		})
	}
}

func testTableRows(t *testing.T, tbl *schema.Table, intPK bool) {
	defer func(n int) { runCompactMin = n }(runCompactMin)
	runCompactMin = 8 // deletes compact the run now and then
	compactions := 0
	rng := rand.New(rand.NewPCG(1, 2))
	id := func(i int) string {
		if intPK {
			return strconv.Itoa(i - 300) // negatives, and lengths that differ
		}
		return "r" + strconv.Itoa(i) // "r10" sorts before "r9": out-of-order ids
	}
	tr, want := newTableRows(tbl), map[string]rowEntry{}
	var version int64
	entry := func() rowEntry { version++; return rowEntry{version: version, data: []byte{byte(version)}} }
	check := func(step int, op string) {
		t.Helper()
		if tr.len() != len(want) {
			t.Fatalf("step %d (%s): len %d, want %d", step, op, tr.len(), len(want))
		}
		got := map[string]rowEntry{}
		tr.each(func(id string, e rowEntry) {
			if _, dup := got[id]; dup {
				t.Fatalf("step %d (%s): each visits %q twice", step, op, id)
			}
			got[id] = e
		})
		for i := range 700 {
			g, gok := tr.get(id(i))
			w, wok := want[id(i)]
			if gok != wok || g.version != w.version {
				t.Fatalf("step %d (%s): get(%q) = %v %v, want %v %v", step, op, id(i), g.version, gok, w.version, wok)
			}
			if e := got[id(i)]; e.version != w.version {
				t.Fatalf("step %d (%s): each has %q at %d, want %d", step, op, id(i), e.version, w.version)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("step %d (%s): each visits %d rows, want %d", step, op, len(got), len(want))
		}
	}
	for step := range 3000 {
		var op string
		switch k := rng.IntN(100); {
		case k < 1: // an image into an empty table: ascending ids
			op = "image"
			tr.reset()
			clear(want)
			ids := make([]int, 0, 600)
			for i := range 600 {
				if rng.IntN(3) > 0 {
					ids = append(ids, i)
				}
			}
			strs := make([]string, len(ids))
			for i, n := range ids {
				strs[i] = id(n)
			}
			slices.SortFunc(strs, tr.idCmp)
			tr.reserve(int64(len(strs)))
			for _, s := range strs {
				e := entry()
				tr.putOrdered(s, e)
				want[s] = e
			}
		case k < 3: // an image over existing rows, partly out of order
			op = "image over rows"
			start := rng.IntN(700)
			for i := start; i < min(700, start+200); i++ {
				e := entry()
				tr.putOrdered(id(i), e)
				want[id(i)] = e
			}
		case k < 30:
			op = "put"
			s, e := id(rng.IntN(700)), entry()
			tr.put(s, e)
			want[s] = e
		case k < 97:
			op = "delete"
			s := id(rng.IntN(700))
			if n := len(tr.runIDs); n > 0 && rng.IntN(4) > 0 {
				s = tr.runIDs[rng.IntN(n)] // mostly image rows, dead or alive
			}
			before := len(tr.runIDs)
			tr.del(s)
			if len(tr.runIDs) < before {
				compactions++
			}
			delete(want, s)
		case k < 99:
			op = "purge"
			mod := rng.IntN(5) + 2
			drop := func(id string, e rowEntry) bool { return e.version%int64(mod) == 0 }
			n := 0
			for s, e := range want {
				if drop(s, e) {
					delete(want, s)
					n++
				}
			}
			if got := tr.deleteIf(drop); got != n {
				t.Fatalf("step %d: purge deleted %d, want %d", step, got, n)
			}
		default:
			op = "reset"
			tr.reset()
			clear(want)
		}
		check(step, op)
	}
	if compactions == 0 {
		t.Fatal("no delete compacted the run")
	}
}

// TestCompareIntIDs: numeric order on decimal ids.
func TestCompareIntIDs(t *testing.T) {
	ids := []string{"-1000", "-999", "-10", "-9", "-1", "0", "1", "9", "10", "11", "99", "100", "9223372036854775807"}
	for i := range ids {
		for j := range ids {
			got, want := compareIntIDs(ids[i], ids[j]), 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("compareIntIDs(%s, %s) = %d, want %d", ids[i], ids[j], got, want)
			}
		}
	}
}
