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

// TestLimited: a statement without a LIMIT of its own gets one on its
// own line (a trailing comment cannot swallow it); one with an outermost
// LIMIT runs as a subquery under the limit; a LIMIT inside parentheses or
// quotes is not the statement's.
func TestLimited(t *testing.T) {
	const defs = `"t" AS (SELECT 1)`
	for _, c := range []struct{ sql, want string }{
		{"SELECT a FROM t ORDER BY a -- last", "WITH " + defs + "\nSELECT a FROM t ORDER BY a -- last\nLIMIT 11"},
		{"SELECT a FROM t WHERE a IN (SELECT a FROM t LIMIT 2)", "WITH " + defs + "\nSELECT a FROM t WHERE a IN (SELECT a FROM t LIMIT 2)\nLIMIT 11"},
		{`SELECT "limit" FROM t`, "WITH " + defs + "\nSELECT \"limit\" FROM t\nLIMIT 11"},
		{"SELECT a FROM t ORDER BY a LIMIT 3", "WITH " + defs + "\nSELECT * FROM (\nSELECT a FROM t ORDER BY a LIMIT 3\n) AS _syncnode_result\nLIMIT 11"},
		{"WITH x AS (SELECT a FROM t) SELECT a FROM x limit ?", "WITH " + defs + "\nSELECT * FROM (\nWITH x AS (SELECT a FROM t) SELECT a FROM x limit ?\n) AS _syncnode_result\nLIMIT 11"},
	} {
		sh, err := Lex(c.sql)
		if err != nil {
			t.Fatalf("%q: %v", c.sql, err)
		}
		if got := Limited(sh, defs, 11); got != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.sql, got, c.want)
		}
	}
}

// TestFolded: the start row's arm leads, its value in StartColumn and
// the declared columns NULL; the statement's rows follow under its own
// LIMIT (wrapped when it has one), StartColumn NULL, the declared columns
// picked by name, a trailing comment unable to swallow the rest.
func TestFolded(t *testing.T) {
	const defs = `"t" AS (SELECT 1)`
	st := Start{Expr: "'s'", From: "(VALUES (1)) AS one"}
	for _, c := range []struct{ sql, want string }{
		{"SELECT a, b FROM t -- last", "WITH " + defs + "\nSELECT 's' AS \"_syncnode_start\", NULL AS \"a\", NULL AS \"b\" FROM (VALUES (1)) AS one\nUNION ALL\n" +
			"SELECT NULL, q.\"a\", q.\"b\" FROM (\nSELECT a, b FROM t -- last\nLIMIT 11\n) AS q"},
		{"SELECT a, b FROM t LIMIT 3", "WITH " + defs + "\nSELECT 's' AS \"_syncnode_start\", NULL AS \"a\", NULL AS \"b\" FROM (VALUES (1)) AS one\nUNION ALL\n" +
			"SELECT NULL, q.\"a\", q.\"b\" FROM (\nSELECT * FROM (\nSELECT a, b FROM t LIMIT 3\n) AS _syncnode_result\nLIMIT 11\n) AS q"},
	} {
		sh, err := Lex(c.sql)
		if err != nil {
			t.Fatalf("%q: %v", c.sql, err)
		}
		if got := Folded(sh, defs, st, []string{"a", "b"}, 11); got != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.sql, got, c.want)
		}
	}
}
