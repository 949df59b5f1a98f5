package sqlitestore

import (
	"context"
	"testing"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/storagetest"
)

var _ storagetest.Twinner = (*Store)(nil)

// HookTwin implements storagetest.Twinner: another Store on the same
// file, as another process would open it.
func (s *Store) HookTwin(tb testing.TB) storage.Store {
	tb.Helper()
	tw, err := Open(context.Background(), Config{Path: s.cfg.Path, Synchronous: s.cfg.Synchronous})
	if err != nil {
		tb.Fatalf("open twin: %v", err)
	}
	tb.Cleanup(func() {
		if err := tw.Close(); err != nil {
			tb.Errorf("close twin: %v", err)
		}
	})
	return tw
}
