package sqlitestore

import (
	"context"
	"fmt"
	"sync"

	"modernc.org/sqlite"
)

// Compiles counts the statements SQLite compiles on a store's writer and
// reader connections (WatchCompiles).
//
// SQLite calls the authorizer for every action of a statement it compiles
// (SQLITE_SELECT, SQLITE_READ per column, SQLITE_INSERT, SQLITE_UPDATE per
// column, SQLITE_TRANSACTION, SQLITE_SAVEPOINT, SQLITE_PRAGMA, ...), on
// sqlite3_prepare and on the re-preparation sqlite3_step makes of an
// expired statement alike, and never while a compiled statement runs.
// Every kind of statement has at least one such action, so a statement
// run during which the authorizer was called compiled once: a
// compilation is a distinct (connection, statement run, SQL text) seen by
// the authorizer. (A statement's first preparation happens before its run
// is counted, so it has its own key: the previous run's number with its
// own SQL.)
type Compiles struct {
	mu    sync.Mutex
	seen  map[compileKey]bool
	known map[*conn]map[string]bool // statements cached when Reset ran
	list  []Compile
	conns map[*conn]string
}

// Compile is one compilation.
type Compile struct {
	Conn  string // "writer" or "reader N"
	SQL   string
	First bool // the statement was not yet cached when Reset ran: a first preparation, not a re-preparation
	// Elsewhere: a first preparation of a statement another connection
	// had cached when Reset ran, as one of a pool's connections meets a
	// statement the others ran before: once per connection, not a cost
	// of every round.
	Elsewhere bool
}

func (c Compile) String() string {
	kind := "re-prepared"
	if c.Elsewhere {
		kind = "first prepared (cached on another connection)"
	} else if c.First {
		kind = "first prepared"
	}
	return fmt.Sprintf("%s, %s: %s", c.Conn, kind, c.SQL)
}

type compileKey struct {
	c   *conn
	ran uint64
	sql string
}

// WatchCompiles registers the counting authorizer on the writer and every
// reader connection. Registering an authorizer expires the connection's
// prepared statements, so watch before warming up.
func (s *Store) WatchCompiles(ctx context.Context) (*Compiles, error) {
	w := &Compiles{seen: map[compileKey]bool{}, known: map[*conn]map[string]bool{}}
	conns := map[*conn]string{}
	register := func(c *conn, name string) error {
		conns[c] = name
		return c.dc.(sqlite.AuthorizerRegisterer).RegisterAuthorizer(
			func(sqlite.AuthorizerActionCode, string, string, string, string) sqlite.AuthorizerReturnCode {
				// Called on the goroutine using c, inside its statement.
				w.mu.Lock()
				defer w.mu.Unlock()
				k := compileKey{c, c.ran, c.sql}
				if !w.seen[k] {
					w.seen[k] = true
					cc := Compile{Conn: name, SQL: c.sql, First: w.known[c] != nil && !w.known[c][c.sql]}
					for o, k := range w.known {
						cc.Elsewhere = cc.Elsewhere || (cc.First && o != c && k[c.sql])
					}
					w.list = append(w.list, cc)
				}
				return sqlite.AuthorizerOK
			})
	}
	if err := s.write(ctx, func(c *conn) error { return register(c, "writer") }); err != nil {
		return nil, err
	}
	var taken []*conn
	defer func() {
		for _, c := range taken {
			s.readers <- c
		}
	}()
	for i := range s.nReaders {
		c, err := s.acquire(ctx, s.readers)
		if err != nil {
			return nil, err
		}
		taken = append(taken, c)
		if err := register(c, fmt.Sprint("reader ", i)); err != nil {
			return nil, err
		}
	}
	w.conns = conns
	return w, nil
}

// Reset forgets the compilations so far and notes which statements each
// connection has cached, to tell first preparations from re-preparations.
// Call it while no store call runs.
func (w *Compiles) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.seen)
	w.list = nil
	for c := range w.conns {
		k := map[string]bool{}
		for q := range c.stmts {
			k[q] = true
		}
		w.known[c] = k
	}
}

// List returns the compilations since the last Reset.
func (w *Compiles) List() []Compile {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Compile(nil), w.list...)
}
