package sqlitestore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// TestLimitsDoNotReprepare: the pull window and the row scan, run with a
// different limit each time on one reader connection (as clients with
// different pull limits and page sizes share its cached statements),
// compile no statement after the first run of each. The authorizer is
// called for every SELECT SQLite compiles, first preparation or
// re-preparation alike, so its calls count the compilations.
func TestLimitsDoNotReprepare(t *testing.T) {
	ctx := t.Context()
	s, tasks := windowStore(t, 30)
	compiles := 0
	err := s.withReader(ctx, func(c *conn) error {
		return c.dc.(sqlite.AuthorizerRegisterer).RegisterAuthorizer(
			func(action sqlite.AuthorizerActionCode, _, _, _, _ string) sqlite.AuthorizerReturnCode {
				if action == sqlite.AuthSelect {
					compiles++
				}
				return sqlite.AuthorizerOK
			})
	})
	if err != nil {
		t.Fatal(err)
	}
	scopes := map[string][]string{tasks.Scopes[0].Variable: {"pr1"}}
	read := func(limit int, afterSeq int64) {
		t.Helper()
		err := s.ReadTx(ctx, func(tx storage.ReadTx) error {
			w, err := tx.CommitWindow(ctx, storage.WindowParams{Partition: "p", Table: "tasks", Scopes: scopes, AfterSeq: afterSeq, Limit: limit})
			if err != nil {
				return err
			}
			if want := min(limit, 30-int(afterSeq)); len(w.Commits) != want {
				return fmt.Errorf("window of limit %d after %d: %d commits, want %d", limit, afterSeq, len(w.Commits), want)
			}
			rows, err := tx.RowScan(ctx, storage.ScanParams{Partition: "p", Table: "tasks", Scopes: scopes, Limit: limit})
			if err != nil {
				return err
			}
			if want := min(limit, 30); len(rows) != want {
				return fmt.Errorf("scan of limit %d: %d rows, want %d", limit, len(rows), want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	read(10, 0) // prepares each statement once
	if compiles == 0 {
		t.Fatal("the authorizer saw no compilation: it does not count them")
	}
	compiles = 0
	for i, limit := range []int{3, 25, 1, 7, 25, 12, 2} {
		read(limit, int64(i))
	}
	if compiles != 0 {
		t.Fatalf("%d statements compiled again when only the limits and cursors changed", compiles)
	}
}

// windowStore is a store with one reader connection whose partition "p"
// holds n one-row commits of tasks in project pr1.
func windowStore(tb testing.TB, n int) (*Store, *schema.Table) {
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: filepath.Join(tb.TempDir(), "sync.db"), Readers: 1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	sc, err := schema.Parse([]byte(planTestSchema))
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.EnsureSchema(ctx, sc); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.PartitionTouch(ctx, "p", 1); err != nil {
		tb.Fatal(err)
	}
	tasks, _ := sc.Table("tasks")
	err = s.WriteTx(ctx, "p", func(tx storage.Tx) error {
		for i := range n {
			rw, err := taskWrite(tasks, fmt.Sprint("t", i), "pr1")
			if err != nil {
				return err
			}
			v, err := tx.RowUpsert(ctx, "tasks", rw)
			if err != nil {
				return err
			}
			_, err = tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: 1, ActorID: "a", ClientID: "c", ClientCommitID: fmt.Sprint(i),
				SchemaVersion: 1, Changes: []storage.Change{{Table: "tasks", RowID: rw.RowID, Op: storage.OpUpsert, RowVersion: v,
					Scopes: rw.Scopes, Row: rw.Payload}}})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s, tasks
}

// BenchmarkWindowLimits is a caught-up pull's window read (the last 2 of
// 1,000 commits): "mixed" by clients asking for 1000, 100 and 200 commits
// in turn, as mixed-soak's readers, writers and realtime clients do on
// shared reader connections, "same" by clients all asking for 100, as in
// push-pull. cpu-µs/op is this process's CPU.
func BenchmarkWindowLimits(b *testing.B) {
	s, tasks := windowStore(b, 1000)
	ctx := context.Background()
	scopes := map[string][]string{tasks.Scopes[0].Variable: {"pr1"}}
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, bc := range []struct {
		name   string
		limits []int
	}{{"mixed", []int{1000, 100, 200}}, {"same", []int{100}}} {
		b.Run(bc.name, func(b *testing.B) {
			cpu0 := cpu()
			defer func() { b.ReportMetric(float64((cpu()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op") }()
			i := 0
			for b.Loop() {
				err := s.ReadTx(ctx, func(tx storage.ReadTx) error {
					w, err := tx.CommitWindow(ctx, storage.WindowParams{Partition: "p", Table: "tasks", Scopes: scopes,
						AfterSeq: 998, Limit: bc.limits[i%len(bc.limits)]})
					if err == nil && len(w.Commits) != 2 {
						err = fmt.Errorf("%d commits", len(w.Commits))
					}
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// TestNoBareLimitParameter: no statement of the package binds a bare
// "LIMIT ?" (see the package documentation), which would bring the
// re-preparations back one statement at a time.
func TestNoBareLimitParameter(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	bare := regexp.MustCompile(`(?i)\b(LIMIT|OFFSET)\s+\?`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if bare.MatchString(line) && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s:%d: a bare bound limit: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// taskWrite is a row of planTestSchema's tasks.
func taskWrite(t *schema.Table, id, project string) (storage.RowWrite, error) {
	row := []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte(project)}, {Bool: false}}
	rowID, err := t.RowID(row)
	if err != nil {
		return storage.RowWrite{}, err
	}
	scopes, missing, ok := t.StoredScopes(row)
	if !ok {
		return storage.RowWrite{}, fmt.Errorf("scope %s missing", missing)
	}
	payload, err := t.Codec.AppendRow(nil, row)
	if err != nil {
		return storage.RowWrite{}, err
	}
	return storage.RowWrite{RowID: rowID, Values: row, Scopes: scopes, Payload: payload}, nil
}
