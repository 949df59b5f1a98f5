package pgstore

import (
	"context"
	"testing"

	"github.com/syncnode/syncnode/storage"
	"github.com/syncnode/syncnode/storage/storagetest"
)

var _ storagetest.Twinner = (*Store)(nil)

// HookTwin implements storagetest.Twinner: another Store on the same
// schema, as another node of a cluster opens it.
func (s *Store) HookTwin(tb testing.TB) storage.Store {
	tb.Helper()
	if s.caching() {
		return nil // a sole writer: no other store may write its schema
	}
	tw, err := open(context.Background(), Config{URL: s.cfg.URL, Schema: s.cfg.Schema, MaxConns: 4}, nil)
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
