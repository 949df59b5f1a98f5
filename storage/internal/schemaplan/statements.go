package schemaplan

import (
	"encoding/binary"
	"sync"

	"github.com/syncnode/syncnode/storage"
)

// Statements keeps registered queries' statement texts for one installed
// schema (a store keeps one beside its schema, so a new schema starts
// empty), by what writes them: the query's SQL, tables, declared column
// names and limit, privileged or scoped, the number of scope values of
// each relation (QueryRelationArgs' counts) and the store's own variant
// of the statement (folded, limited). Writing a text — lexing the SQL,
// the relations, the limit or fold — cost a run more CPU than reading
// its hundred rows; the texts are few (a registration has one per shape
// of its coverage), so a run converts its values and looks its text up.
// The zero Statements is ready.
type Statements struct {
	mu    sync.Mutex
	texts map[string]string
}

// statementsMax bounds the texts kept: past it the cache starts over (a
// deployment's registrations have far fewer shapes).
const statementsMax = 1024

// Text returns the text of the statement p runs as in the store's
// variant, written by write on a miss.
func (c *Statements) Text(p *storage.QueryParams, variant byte, counts []int, write func() (string, error)) (string, error) {
	var kb [256]byte
	key := statementKey(kb[:0], p, variant, counts)
	c.mu.Lock()
	text, ok := c.texts[string(key)]
	c.mu.Unlock()
	if ok {
		return text, nil
	}
	text, err := write()
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	if c.texts == nil || len(c.texts) >= statementsMax {
		c.texts = map[string]string{}
	}
	c.texts[string(key)] = text
	c.mu.Unlock()
	return text, nil
}

// statementKey appends to b the key of a statement's text: every string
// length-prefixed, so no two inputs share one.
func statementKey(b []byte, p *storage.QueryParams, variant byte, counts []int) []byte {
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = append(b, variant)
	if p.Scopes != nil {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(p.Limit))
	b = binary.AppendUvarint(b, uint64(len(counts)))
	for _, n := range counts {
		b = binary.AppendUvarint(b, uint64(n))
	}
	b = binary.AppendUvarint(b, uint64(len(p.Tables)))
	for _, t := range p.Tables {
		str(t)
	}
	b = binary.AppendUvarint(b, uint64(len(p.Columns)))
	for _, c := range p.Columns {
		str(c.Name)
	}
	str(p.SQL)
	return b
}
