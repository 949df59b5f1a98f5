package bus

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
)

func TestReactionSubjects(t *testing.T) {
	if s, err := prod.ReactionWorkSubject("email.send"); err != nil || s != "syncreact.work.email.send" {
		t.Fatalf("work subject = %q, %v", s, err)
	}
	for _, bad := range []string{"", "email.*", "email.>", "a b", "a..b", ".a", "a.", "1a", strings.Repeat("a", 129)} {
		if s, err := prod.ReactionWorkSubject(bad); err == nil {
			t.Errorf("work subject of type %q = %q, want refused", bad, s)
		}
	}
	p, _ := NewPartition("a.b")
	s, err := prod.ReactionEventSubject(p, ReactionDeadLettered, "email.send")
	if err != nil || s != "syncreact.event.a=2Eb.dead_lettered.email.send" {
		t.Fatalf("event subject = %q, %v", s, err)
	}
	tok, ev, typ, ok := prod.ParseReactionEventSubject(s)
	if !ok || tok != p.Token() || ev != ReactionDeadLettered || typ != "email.send" {
		t.Fatalf("parse %q = %q %q %q %v", s, tok, ev, typ, ok)
	}
	if _, err := prod.ReactionEventSubject(p, "exploded", "t"); err == nil {
		t.Fatal("an unknown event was accepted")
	}
	for _, bad := range []string{"syncreact.event.p.completed", "syncreact.event.p.nope.t", "syncreact.work.t", "syncreact.event..completed.t",
		"syncreact.event. .completed.t", "syncreact.event.a=2e.completed.t", "syncreact.event.h_abc.completed.t"} {
		if _, _, _, ok := prod.ParseReactionEventSubject(bad); ok {
			t.Errorf("parsed %q", bad)
		}
	}
	f, err := prod.ReactionEventFilter(ReactionRequeued)
	if err != nil || f != "syncreact.event.*.requeued.>" {
		t.Fatalf("filter = %q, %v", f, err)
	}
	// Work and event subjects never fall under the commit or control
	// spaces.
	for _, s := range []string{prod.ReactionWork(), prod.ReactionEvents()} {
		if strings.HasPrefix(s, commitPrefix) || strings.HasPrefix(s, controlPrefix) {
			t.Errorf("%s overlaps the commit or control subjects", s)
		}
	}
}

func TestNewReactionEventMsg(t *testing.T) {
	long := strings.Repeat("tenant/", 20)
	p, _ := NewPartition(long)
	at := time.UnixMilli(1_700_000_000_123)
	m, err := NewReactionEventMsg(prod, "node1", ReactionEvent{Event: ReactionCompleted, Partition: p, Type: "email.send", Time: at,
		Data: map[string]any{"attempt": 2}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "syncreact.event." + p.Token() + ".completed.email.send"; m.Subject != want {
		t.Fatalf("subject = %q, want %q", m.Subject, want)
	}
	for h, want := range map[string]string{
		HeaderSpecVersion:   SpecVersion,
		HeaderType:          "dev.syncnode.reaction.completed.v1",
		HeaderSource:        "syncnode://node1",
		HeaderTime:          "2023-11-14T22:13:20.123Z",
		HeaderSubject:       p.Token() + "/email.send",
		HeaderPartition:     p.Token(),
		HeaderEventName:     ReactionCompleted,
		HeaderReactionType:  "email.send",
		HeaderSyncPartition: p.Escaped(),
	} {
		if got := m.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	// A CloudEvents SDK reads it.
	ev, err := binding.ToEvent(context.Background(), cejs.NewMessage(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type() != "dev.syncnode.reaction.completed.v1" || ev.Extensions()["reactiontype"] != "email.send" {
		t.Fatalf("decoded event %v", ev)
	}
	var body map[string]int
	if err := json.Unmarshal(ev.Data(), &body); err != nil || body["attempt"] != 2 {
		t.Fatalf("body %s: %v", ev.Data(), err)
	}
}

// FuzzParseReactionEventSubject: whatever parses builds the same subject
// back.
func FuzzParseReactionEventSubject(f *testing.F) {
	for _, s := range []string{"syncreact.event.acme.completed.email.send", "syncreact.event.a=2Eb.failed.t", "syncreact.event.h_ABCDEFGHIJKLMNOPQRSTUVWXYZ.requeued.x-y_z",
		"syncreact.event..completed.t", "syncreact.work.t"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, event, typ, ok := prod.ParseReactionEventSubject(s)
		if !ok {
			return
		}
		if strings.ContainsAny(tok, ".*> ") {
			t.Fatalf("%q parsed to token %q", s, tok)
		}
		if got := reactionEventPrefix + tok + "." + event + "." + typ; got != s {
			t.Fatalf("%q parsed to %q %q %q, which builds %q", s, tok, event, typ, got)
		}
	})
}
