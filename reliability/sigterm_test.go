package reliability

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/syncnode/syncnode/embedded"
	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/pgstore"
	"github.com/syncnode/syncnode/storage/sqlitestore"
)

// TestSIGTERMFlushesRelay stops a node with SIGTERM in the middle of a
// push storm: when the process has exited, every acknowledged commit is
// on the bus already, before any restart (the relay drained on shutdown).
func TestSIGTERMFlushesRelay(t *testing.T) {
	onBothStores(t, func(t *testing.T, st store) {
		s := newStorm(t, 4)
		for trial := range pick(3, 20) {
			c := startChild(t, st)
			end := s.until(c, trial, 10)
			if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			err := c.cmd.Wait()
			end()
			if err != nil {
				t.Fatalf("trial %d: child exit %v after SIGTERM:\n%s", trial, err, c.out)
			}
			s.checkStopped(st, trial)
		}
	})
}

// checkStopped opens the stopped node's store and JetStream store without
// a relay, and checks that the bus holds every commit of the log.
func (s *storm) checkStopped(st store, trial int) {
	t := s.t
	t.Helper()
	ctx := context.Background()
	var db storage.Store
	var err error
	if st.pgURL != "" {
		db, err = pgstore.Open(ctx, pgstore.Config{URL: st.pgURL, Schema: st.pgSchema})
	} else {
		db, err = sqlitestore.Open(ctx, sqlitestore.Config{Path: filepath.Join(st.dataDir, "syncnode.db")})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ns, err := embedded.New(embedded.Config{DataDir: st.dataDir, Port: embedded.RandomPort})
	if err == nil {
		err = ns.Start(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Stop(ctx)
	commits := s.checkLog(db)
	t.Logf("trial %d: %d commits in the log after a clean stop", trial, len(commits))
	checkBus(t, ns.JetStream(), "storm", commits, true)
}
