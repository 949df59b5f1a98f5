package sqlitestore

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// The crash test re-executes the test binary as a child that opens the
// database, writes inside a WriteTx (spilling dirty pages into the WAL),
// reports readiness on a pipe and waits; the parent SIGKILLs it before
// COMMIT and checks that nothing of the transaction is visible after
// reopening and that the store is consistent.

const crashChildEnv = "SYNCNODE_SQLITESTORE_CRASH_CHILD"

var crashSchema = `{"version": 1, "tables": [{"name": "items", "primaryKey": "id",
	"columns": [{"name": "id", "type": "string"}, {"name": "owner", "type": "string"}, {"name": "body", "type": "string"}],
	"scopes": ["owner:{owner}"]}]}`

func crashRow(t testing.TB, sc *schema.Schema, id string) storage.RowWrite {
	tb, _ := sc.Table("items")
	vals := []ssp2.Value{{Bytes: []byte(id)}, {Bytes: []byte("o1")}, {Bytes: []byte(strings.Repeat("x", 2000))}}
	payload, err := tb.Codec.AppendRow(nil, vals)
	if err != nil {
		t.Fatal(err)
	}
	return storage.RowWrite{RowID: id, Values: vals, Scopes: map[string]string{"owner": "o1"}, Payload: payload}
}

// crashCommit writes n rows and appends one commit for them.
func crashCommit(ctx context.Context, t testing.TB, sc *schema.Schema, tx storage.Tx, prefix string, n int) error {
	var changes []storage.Change
	for i := range n {
		rw := crashRow(t, sc, fmt.Sprintf("%s-%04d", prefix, i))
		v, err := tx.RowUpsert(ctx, "items", rw)
		if err != nil {
			return err
		}
		changes = append(changes, storage.Change{Table: "items", RowID: rw.RowID, Op: storage.OpUpsert, RowVersion: v, Scopes: rw.Scopes, Row: rw.Payload})
	}
	_, err := tx.CommitAppend(ctx, storage.CommitParams{CreatedAtMs: 1, ActorID: "a", ClientID: "c", ClientCommitID: prefix, SchemaVersion: 1, Changes: changes})
	return err
}

func TestCrashMidTransaction(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(t, path)
		return
	}
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "crash.db")
	sc, err := schema.Parse([]byte(crashSchema))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	p, err := s.PartitionTouch(ctx, "p", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteTx(ctx, p.ID, func(tx storage.Tx) error { return crashCommit(ctx, t, sc, tx, "before", 10) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashMidTransaction$", "-test.v")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	cmd.ExtraFiles = []*os.File{w} // fd 3 in the child
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	line, err := bufio.NewReader(r).ReadString('\n')
	var before, during int64
	if err == nil {
		_, err = fmt.Sscanf(line, "ready %d %d\n", &before, &during)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child did not get ready (%q, %v):\n%s", line, err, out.String())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child exit = %v, want killed:\n%s", err, out.String())
	}
	if during <= before {
		t.Fatalf("the child's transaction wrote no WAL frames before COMMIT (%d → %d bytes): the test would prove nothing", before, during)
	}

	s, err = Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Fatalf("EnsureSchema after the crash: %v", err)
	}
	if seq, err := s.CommitMaxSeq(ctx, p.ID); err != nil || seq != 1 {
		t.Fatalf("CommitMaxSeq after the crash = %d, %v; want 1", seq, err)
	}
	commits, err := s.CommitRange(ctx, p.ID, 0, 100)
	if err != nil || len(commits) != 1 || commits[0].ClientCommitID != "before" || len(commits[0].Changes) != 10 {
		t.Fatalf("commits after the crash = %+v, %v", commits, err)
	}
	err = s.ReadTx(ctx, func(tx storage.ReadTx) error {
		rows, err := tx.RowScan(ctx, storage.ScanParams{Partition: p.ID, Table: "items", Scopes: map[string][]string{"owner": {"o1"}}, Limit: 1000})
		if err != nil {
			return err
		}
		for _, r := range rows {
			if !strings.HasPrefix(r.RowID, "before-") {
				t.Errorf("row %s of the killed transaction is visible", r.RowID)
			}
		}
		if len(rows) != 10 {
			t.Errorf("%d rows after the crash, want 10", len(rows))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var check string
	if err := s.write(ctx, func(c *conn) error {
		_, err := c.queryRow(ctx, "PRAGMA integrity_check", nil, &check)
		return err
	}); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	// The log continues densely.
	var seq int64
	if err := s.WriteTx(ctx, p.ID, func(tx storage.Tx) error {
		if err := crashCommit(ctx, t, sc, tx, "after", 3); err != nil {
			return err
		}
		seq = tx.Locked().MaxCommitSeq + 1
		return nil
	}); err != nil || seq != 2 {
		t.Fatalf("commit after the crash: seq %d, %v", seq, err)
	}
}

// crashChild runs in the child process: it writes enough inside one
// transaction that SQLite spills pages into the WAL, then reports ready
// and blocks until killed.
func crashChild(t *testing.T, path string) {
	ctx := context.Background()
	sc, err := schema.Parse([]byte(crashSchema))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureSchema(ctx, sc); err != nil {
		t.Fatal(err)
	}
	ready := os.NewFile(3, "ready")
	walSize := func() int64 {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	before := walSize()
	err = s.WriteTx(ctx, "p", func(stx storage.Tx) error {
		// A small page cache makes SQLite write dirty pages to the WAL
		// before COMMIT, so the crash leaves uncommitted frames behind.
		if err := stx.(*tx).c.execOnce(ctx, "PRAGMA cache_size=8"); err != nil {
			return err
		}
		for i := range 5 {
			if err := crashCommit(ctx, t, sc, stx, fmt.Sprint("during", i), 200); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(ready, "ready %d %d\n", before, walSize()); err != nil {
			return err
		}
		select {} // killed here, inside the transaction
	})
	t.Fatalf("child transaction returned: %v", err)
}
