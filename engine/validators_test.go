package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

func TestSetValidators(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	push := func(ccid, title string) *ssp2.PushResult {
		t.Helper()
		m := h.sync(alice, 2, hdr("c", ep), commit(ccid, upsert("t-"+ccid, h.row("t-"+ccid, "p1", title))))
		return frames[*ssp2.PushResult](m)[0]
	}
	if r := push("a", "x"); r.Status != ssp2.PushApplied {
		t.Fatalf("without validators: %+v", r)
	}

	refuse := func(_ context.Context, v RowValidation) error { return Reject("app.row", "no rows today") }
	if err := h.e.SetValidators(map[string]RowValidator{"tasks": refuse}, nil); err != nil {
		t.Fatal(err)
	}
	if r := push("b", "x"); r.Status != ssp2.PushRejected || r.Results[0].Code != "app.row" {
		t.Fatalf("row validator installed: %+v", r)
	}

	whole := func(_ context.Context, v CommitValidation) error {
		return &Rejection{Code: "app.commit", Message: "no commits today"}
	}
	if err := h.e.SetValidators(nil, whole); err != nil {
		t.Fatal(err)
	}
	if r := push("c", "x"); r.Status != ssp2.PushRejected || r.Results[0].Code != "app.commit" {
		t.Fatalf("commit validator replaced the row validator: %+v", r)
	}

	if err := h.e.SetValidators(map[string]RowValidator{"nope": refuse}, nil); err == nil {
		t.Fatal("a validator for an unknown table was accepted")
	}
	if r := push("d", "x"); r.Status != ssp2.PushRejected || r.Results[0].Code != "app.commit" {
		t.Fatalf("a refused SetValidators changed the installed set: %+v", r)
	}

	if err := h.e.SetValidators(nil, nil); err != nil {
		t.Fatal(err)
	}
	if r := push("e", "x"); r.Status != ssp2.PushApplied {
		t.Fatalf("after clearing: %+v", r)
	}
}

// TestSetValidatorsRace swaps validator sets while commits run: every
// commit must be judged by one set, never by the row validator of one and
// the commit validator of another. Run with -race.
func TestSetValidatorsRace(t *testing.T) {
	var commits atomic.Int64
	h := newHarness(t, func(c *Config) { c.OnCommit = func(string) { commits.Add(1) } })
	alice := id("alice", "p1")
	ep := h.epoch(alice)

	// Each set tags the commit with its generation in the row validator
	// and checks the tag in the commit validator.
	var mixed atomic.Int64
	set := func(gen int64) error {
		var seen sync.Map // clientCommitId → generation
		row := func(_ context.Context, v RowValidation) error {
			seen.Store(v.RowID, gen)
			return nil
		}
		whole := func(_ context.Context, v CommitValidation) error {
			if g, ok := seen.Load(v.Operations[0].RowID); !ok || g.(int64) != gen {
				mixed.Add(1)
			}
			return nil
		}
		return h.e.SetValidators(map[string]RowValidator{"tasks": row}, whole)
	}
	if err := set(0); err != nil {
		t.Fatal(err)
	}

	const writers, perWriter = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	stop := make(chan struct{})
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		for gen := int64(1); ; gen++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := set(gen); err != nil {
				errs <- err
				return
			}
		}
	}()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				rid := fmt.Sprintf("w%d-%d", w, i)
				body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
					hdr(fmt.Sprintf("c%d", w), ep), commit(rid, upsert(rid, h.row(rid, "p1", "x"))),
				}}).AppendEncode(nil)
				if err != nil {
					errs <- err
					return
				}
				var out bytes.Buffer
				if err := h.e.Sync(context.Background(), alice, body, &out); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-swapped
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := mixed.Load(); n != 0 {
		t.Fatalf("%d commits were judged by two validator sets", n)
	}
	if n := commits.Load(); n != writers*perWriter {
		t.Fatalf("applied %d commits, want %d", n, writers*perWriter)
	}
}

func TestChainCommitValidators(t *testing.T) {
	t.Parallel()
	if ChainCommitValidators(nil, nil) != nil {
		t.Fatal("a chain of nils is not nil")
	}
	var calls []string
	accept := func(name string) CommitValidator {
		return func(context.Context, CommitValidation) error { calls = append(calls, name); return nil }
	}
	reject := func(name string) CommitValidator {
		return func(context.Context, CommitValidation) error {
			calls = append(calls, name)
			return Reject("host."+name, name)
		}
	}
	err := ChainCommitValidators(accept("a"), nil, reject("b"), accept("c"))(context.Background(), CommitValidation{})
	var rj *Rejection
	if !errors.As(err, &rj) || rj.Code != "host.b" {
		t.Fatalf("chain = %v, want host.b", err)
	}
	if got := strings.Join(calls, ","); got != "a,b" {
		t.Fatalf("calls = %s, want a,b (the chain stops at the first rejection)", got)
	}
	calls = nil
	if err := ChainCommitValidators(accept("a"), accept("c"))(context.Background(), CommitValidation{}); err != nil || len(calls) != 2 {
		t.Fatalf("accepting chain = %v, calls %v", err, calls)
	}
}
