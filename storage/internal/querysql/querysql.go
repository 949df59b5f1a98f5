// Package querysql is the lexical part of registered queries written
// once for both stores: finding the statement's placeholders, its first
// keyword and anything after its end, outside string literals, quoted
// identifiers and comments. Parsing proper is SQLite's (sqlitestore).
package querysql

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Shape is what the lexer found in one statement.
type Shape struct {
	// Keyword is the first keyword, upper-cased ("SELECT", "WITH", …).
	Keyword string
	// Placeholders are the byte offsets of the ? placeholders, in order.
	Placeholders []int
	// Body is the statement without a trailing semicolon and whitespace.
	Body string
	// Identifiers are the bare and quoted identifiers (and keywords), as
	// written, without quotes.
	Identifiers []string
	// KeywordEnd is the offset just after Keyword; for a statement
	// starting WITH RECURSIVE, RecursiveEnd is the offset just after
	// RECURSIVE (0 otherwise).
	KeywordEnd   int
	RecursiveEnd int
	// TopLimit is set when the statement has a LIMIT of its own outside
	// parentheses (its outermost SELECT's).
	TopLimit bool
}

// Lex scans sql. It refuses numbered or named placeholders (?1, :x, @x,
// $x), which the positional form of a registered query excludes, a
// second statement after a semicolon, and unterminated literals or
// comments.
func Lex(sql string) (Shape, error) {
	var sh Shape
	end := -1  // offset of the terminating semicolon
	depth := 0 // parentheses open
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'' || c == '"' || c == '`' || c == '[':
			closer := c
			if c == '[' {
				closer = ']'
			}
			j := i + 1
			for {
				k := strings.IndexByte(sql[j:], closer)
				if k < 0 {
					return Shape{}, fmt.Errorf("unterminated quoted text at offset %d", i)
				}
				j += k + 1
				if closer != ']' && j < len(sql) && sql[j] == closer { // doubled quote
					j++
					continue
				}
				break
			}
			if end >= 0 {
				return Shape{}, errSecond
			}
			if c != '\'' {
				sh.Identifiers = append(sh.Identifiers, strings.ReplaceAll(sql[i+1:j-1], string(closer)+string(closer), string(closer)))
			}
			i = j
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			k := strings.IndexByte(sql[i:], '\n')
			if k < 0 {
				i = len(sql)
			} else {
				i += k + 1
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			k := strings.Index(sql[i+2:], "*/")
			if k < 0 {
				return Shape{}, fmt.Errorf("unterminated comment at offset %d", i)
			}
			i += k + 4
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		default:
			if end >= 0 {
				return Shape{}, errSecond
			}
			switch {
			case c == ';':
				end = i
				i++
			case c == '(' || c == ')':
				if c == '(' {
					depth++
				} else {
					depth--
				}
				i++
			case c == '?':
				if i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9' {
					return Shape{}, fmt.Errorf("numbered placeholder at offset %d: use plain ?", i)
				}
				sh.Placeholders = append(sh.Placeholders, i)
				i++
			case c == ':' || c == '@' || c == '$':
				if i+1 < len(sql) && isIdent(sql[i+1]) {
					return Shape{}, fmt.Errorf("named placeholder at offset %d: use plain ?", i)
				}
				i++
			case isIdent(c) && !(c >= '0' && c <= '9'):
				j := i
				for j < len(sql) && isIdent(sql[j]) {
					j++
				}
				switch {
				case sh.Keyword == "":
					sh.Keyword = strings.ToUpper(sql[i:j])
					sh.KeywordEnd = j
				case len(sh.Identifiers) == 1 && sh.Keyword == "WITH" && strings.EqualFold(sql[i:j], "RECURSIVE"):
					sh.RecursiveEnd = j
				case depth == 0 && strings.EqualFold(sql[i:j], "LIMIT"):
					sh.TopLimit = true
				}
				sh.Identifiers = append(sh.Identifiers, sql[i:j])
				i = j
			default:
				i++
			}
		}
	}
	sh.Body = sql
	if end >= 0 {
		sh.Body = sql[:end]
	}
	sh.Body = strings.TrimRight(sh.Body, " \t\n\r\f")
	if sh.Keyword == "" {
		return Shape{}, errors.New("empty statement")
	}
	return sh, nil
}

var errSecond = errors.New("a second statement follows the first")

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// Numbered rewrites the placeholders of sh.Body with format(n) for the
// n-th (1-based): PostgreSQL's $n.
func Numbered(sh Shape, format func(n int) string) string {
	var b strings.Builder
	last := 0
	for n, off := range sh.Placeholders {
		b.WriteString(sh.Body[last:off])
		b.WriteString(format(n + 1))
		last = off + 1
	}
	b.WriteString(sh.Body[last:])
	return b.String()
}

// WithRelations returns sh.Body behind a WITH clause whose first common
// table expressions are defs (comma-separated "name AS (…)" items): a
// statement that has its own WITH keeps its expressions after defs, and
// its RECURSIVE. The statement's text is never altered otherwise.
func WithRelations(sh Shape, defs string) string {
	if sh.Keyword != "WITH" {
		return "WITH " + defs + "\n" + sh.Body
	}
	if sh.RecursiveEnd > 0 {
		return "WITH RECURSIVE " + defs + "," + sh.Body[sh.RecursiveEnd:]
	}
	return "WITH " + defs + "," + sh.Body[sh.KeywordEnd:]
}

// Limited returns WithRelations(sh, defs) reading at most limit rows: a
// LIMIT clause appended on a line of its own (after any trailing line
// comment), or, when the statement has its own outermost LIMIT, the
// statement as a subquery under one (an ORDER BY with a LIMIT keeps its
// rows and their order as a subquery on both stores). limit is a
// registration constant, never a request value.
func Limited(sh Shape, defs string, limit int) string {
	if !sh.TopLimit {
		return WithRelations(sh, defs) + "\nLIMIT " + strconv.Itoa(limit)
	}
	return "WITH " + defs + "\n" + limitedBody(sh, limit)
}

// limitedBody is sh.Body reading at most limit rows, as Limited bounds it.
func limitedBody(sh Shape, limit int) string {
	lim := "\nLIMIT " + strconv.Itoa(limit)
	if !sh.TopLimit {
		return sh.Body + lim
	}
	return "SELECT * FROM (\n" + sh.Body + "\n) AS _syncnode_result" + lim
}

// StartColumn names the start row's column in a Folded statement.
const StartColumn = "_syncnode_start"

// Start is the start row of a folded statement: Expr, one text value
// in the form ParseStart reads, selected FROM From (at most one row; the
// store says what none means).
type Start struct{ Expr, From string }

// Folded returns the statement a registered query runs as on its own
// (storage.Querier.Query) on PostgreSQL: behind the relations defs, one
// statement reading both a start row — st.Expr in a column of its own,
// StartColumn, the declared columns NULL — and the statement's rows
// (StartColumn NULL, then the declared columns cols in order), at most
// limit under the statement's own LIMIT, planned with it. One statement
// reads one snapshot, so the start row and the rows agree without a
// transaction around them. The start row is told by its StartColumn,
// wherever it comes.
func Folded(sh Shape, defs string, st Start, cols []string, limit int) string {
	var b strings.Builder
	b.WriteString("WITH " + defs + "\nSELECT " + st.Expr + " AS " + quoteIdent(StartColumn))
	for _, c := range cols {
		b.WriteString(", NULL AS " + quoteIdent(c))
	}
	b.WriteString(" FROM " + st.From + "\nUNION ALL\nSELECT NULL")
	for _, c := range cols {
		b.WriteString(", q." + quoteIdent(c))
	}
	b.WriteString(" FROM (\n" + limitedBody(sh, limit) + "\n) AS q")
	return b.String()
}

func quoteIdent(ident string) string { return `"` + strings.ReplaceAll(ident, `"`, `""`) + `"` }
