package engine

import (
	"fmt"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
)

// The subscriptions of one request are capped (default 500): past the cap
// the whole request is refused before any section is served, so one
// request cannot make the node build thousands of bootstrap pages.
func TestSubscriptionCap(t *testing.T) {
	h := newHarness(t, nil)
	alice := id("alice", "p1")
	ep := h.epoch(alice)
	subs := func(n int) []ssp2.Frame {
		f := []ssp2.Frame{hdr("c", ep), &ssp2.PullHeader{Accept: 3}}
		for i := range n {
			f = append(f, sub(fmt.Sprint("s", i), -1, "p1"))
		}
		return f
	}
	_, err := h.try(alice, 2, subs(501)...)
	wantCode(t, err, ssp2.CodeInvalidSubscription)
	if m := h.sync(alice, 2, subs(500)...); len(frames[*ssp2.SubEnd](m)) != 500 {
		t.Fatal("500 subscriptions were not all answered")
	}

	small := newHarness(t, func(c *Config) { c.MaxSubscriptions = 2 })
	ep = small.epoch(alice)
	_, err = small.try(alice, 2, hdr("c", ep), &ssp2.PullHeader{Accept: 3}, sub("a", -1, "p1"), sub("b", -1, "p1"), sub("c", -1, "p1"))
	wantCode(t, err, ssp2.CodeInvalidSubscription)
}
