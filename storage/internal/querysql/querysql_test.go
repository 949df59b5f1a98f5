package querysql

import "testing"

// TestWithRelations: the relations lead a statement's own WITH clause
// (keeping its RECURSIVE) or open one; the statement's text is kept.
func TestWithRelations(t *testing.T) {
	const defs = `"t" AS (SELECT 1)`
	for _, c := range []struct{ sql, want string }{
		{"SELECT a FROM t WHERE b = ?;", "WITH " + defs + "\nSELECT a FROM t WHERE b = ?"},
		{"-- lead\nSELECT a FROM t", "WITH " + defs + "\n-- lead\nSELECT a FROM t"},
		{"WITH x AS (SELECT a FROM t) SELECT a FROM x", "WITH " + defs + ", x AS (SELECT a FROM t) SELECT a FROM x"},
		{"with recursive n(i) AS (SELECT 1) SELECT i FROM n", "WITH RECURSIVE " + defs + ", n(i) AS (SELECT 1) SELECT i FROM n"},
		{`WITH "recursive" AS (SELECT 1) SELECT * FROM "recursive"`, "WITH " + defs + `, "recursive" AS (SELECT 1) SELECT * FROM "recursive"`},
	} {
		sh, err := Lex(c.sql)
		if err != nil {
			t.Fatalf("%q: %v", c.sql, err)
		}
		if got := WithRelations(sh, defs); got != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.sql, got, c.want)
		}
	}
}
