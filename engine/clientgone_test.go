package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// levelLog records the level of every log record.
type levelLog struct {
	mu     sync.Mutex
	errors []string
}

func (l *levelLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *levelLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		l.mu.Lock()
		l.errors = append(l.errors, r.Message)
		l.mu.Unlock()
	}
	return nil
}
func (l *levelLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *levelLog) WithGroup(string) slog.Handler      { return l }

// brokenPipe takes n bytes, then fails like a socket whose peer left.
type brokenPipe struct{ n int }

func (b *brokenPipe) Write(p []byte) (int, error) {
	if len(p) > b.n {
		n := b.n
		b.n = 0
		return n, fmt.Errorf("write tcp 127.0.0.1:8080->127.0.0.1:5555: %w", syscall.EPIPE)
	}
	b.n -= len(p)
	return len(p), nil
}

// A client that goes away — mid-response, or before the response started
// — is not a server error: nothing is logged at ERROR and the request is
// counted as gone, not failed.
func TestClientGoneIsNotAnError(t *testing.T) {
	log := &levelLog{}
	h := newHarness(t, func(c *Config) { c.Logger = slog.New(log) })
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	var ops []ssp2.Operation
	for i := range 200 {
		rid := fmt.Sprint("t", i)
		ops = append(ops, upsert(rid, h.row(rid, "p1", "a title long enough to fill a few kilobytes")))
	}
	h.sync(alice, 2, hdr("c", ep), commit("k", ops...))
	body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		hdr("c", ep), &ssp2.PullHeader{Accept: 3}, sub("a", -1, "p1"), sub("b", 0, "p1"),
	}}).AppendEncode(nil)
	if err != nil {
		t.Fatal(err)
	}
	before := h.e.Metrics().RequestErrors.Load()

	// Mid-response: the socket breaks.
	if err := h.e.Sync(context.Background(), alice, body, &brokenPipe{n: 200}); err != nil {
		t.Fatalf("Sync = %v after the response started", err)
	}
	// Before the response: the request's context is cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = h.e.Sync(ctx, alice, body, &brokenPipe{n: 1 << 20})

	if len(log.errors) > 0 {
		t.Fatalf("a client going away was logged at ERROR: %q", log.errors)
	}
	if got := h.e.Metrics().RequestErrors.Load(); got != before {
		t.Fatalf("request errors %d → %d for clients that went away", before, got)
	}
	if got := h.e.Metrics().ClientsGone.Load(); got != 2 {
		t.Fatalf("clients gone = %d, want 2", got)
	}
}
