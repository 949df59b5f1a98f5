package schemaplan

import (
	"errors"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// TestStatements: a text is written once per shape and variant and kept;
// any part of what writes it — SQL, tables, column names, limit, scoped
// or not, the scope counts, the variant — is a shape of its own; a failed
// write keeps nothing.
func TestStatements(t *testing.T) {
	base := storage.QueryParams{QuerySpec: storage.QuerySpec{SQL: "SELECT id FROM tasks", Tables: []string{"tasks"},
		Columns: []storage.QueryColumn{{Name: "id", Type: ssp2.TypeString}}, Limit: 5}}
	type shape struct {
		p       storage.QueryParams
		variant byte
		counts  []int
	}
	with := func(f func(p *storage.QueryParams)) storage.QueryParams {
		p := base
		f(&p)
		return p
	}
	shapes := []shape{
		{p: base},
		{p: base, variant: 1},
		{p: with(func(p *storage.QueryParams) { p.SQL = "SELECT id FROM tasks ORDER BY id" })},
		{p: with(func(p *storage.QueryParams) { p.Tables = []string{"tasks", "notes"} })},
		{p: with(func(p *storage.QueryParams) { p.Columns = []storage.QueryColumn{{Name: "x"}} })},
		{p: with(func(p *storage.QueryParams) { p.Limit = 6 })},
		{p: with(func(p *storage.QueryParams) { p.Scopes = map[string]map[string][]string{} })},
		{p: with(func(p *storage.QueryParams) { p.Scopes = map[string]map[string][]string{} }), counts: []int{1}},
		{p: with(func(p *storage.QueryParams) { p.Scopes = map[string]map[string][]string{} }), counts: []int{2}},
		// Length prefixes: moving a character between strings is another key.
		{p: with(func(p *storage.QueryParams) { p.Tables = []string{"task", "snotes"} })},
	}
	var c Statements
	writes := 0
	for round := range 2 {
		for i, sh := range shapes {
			text, err := c.Text(&sh.p, sh.variant, sh.counts, func() (string, error) {
				writes++
				return string(rune('a' + i)), nil
			})
			if err != nil || text != string(rune('a'+i)) {
				t.Fatalf("round %d shape %d: %q, %v", round, i, text, err)
			}
		}
		if writes != len(shapes) {
			t.Fatalf("round %d: %d writes for %d shapes", round, writes, len(shapes))
		}
	}
	boom := errors.New("boom")
	p := with(func(p *storage.QueryParams) { p.SQL = "bad" })
	for range 2 {
		if _, err := c.Text(&p, 0, nil, func() (string, error) { writes++; return "", boom }); !errors.Is(err, boom) {
			t.Fatalf("failed write: %v", err)
		}
	}
	if writes != len(shapes)+2 {
		t.Fatalf("a failed write was kept: %d writes", writes)
	}
}
