package bus

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestGlobalTokenIsNoPartition(t *testing.T) {
	if _, err := ParseToken(GlobalToken); err == nil {
		t.Fatalf("ParseToken(%q) accepted the global token", GlobalToken)
	}
	for _, id := range []string{"=global", "global", "=", "", "_global"} {
		p, err := NewPartition(id)
		if err != nil {
			t.Fatal(err)
		}
		if p.Token() == GlobalToken {
			t.Fatalf("partition %q escapes to the global token", id)
		}
	}
	subj, err := prod.GlobalControlSubject(EventSchemaMigrated)
	if err != nil || subj != "syncctl.=global.schema_migrated" {
		t.Fatalf("GlobalControlSubject = %q, %v", subj, err)
	}
	if _, err := prod.GlobalControlSubject("Bad Event"); err == nil {
		t.Fatal("GlobalControlSubject accepted a bad event name")
	}
}

func TestParseGateKey(t *testing.T) {
	p, _ := NewPartition("a.b")
	for _, tc := range []struct {
		key   string
		token string
		ok    bool
	}{
		{GateKey(p), p.Token(), true},
		{GateSchemaKey, "", false},
		{"gate.", "", false},
		{"gate.a.b", "", false},
	} {
		tok, ok := ParseGateKey(tc.key)
		if ok != tc.ok || ok && tok != tc.token {
			t.Errorf("ParseGateKey(%q) = %q, %v; want %q, %v", tc.key, tok, ok, tc.token, tc.ok)
		}
	}
}

func TestNewControlMsg(t *testing.T) {
	p, _ := NewPartition("user@example.com")
	at := time.UnixMilli(1_700_000_000_123)
	m, err := NewControlMsg(prod, "node1", ControlEvent{Event: EventCheckpointDeclared, Partition: &p, Subject: p.Token() + "/proj", Time: at,
		Data: map[string]any{"name": "proj"}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "syncctl.user=40example=2Ecom.checkpoint_declared" {
		t.Fatalf("subject = %q", m.Subject)
	}
	for h, want := range map[string]string{
		HeaderSpecVersion: SpecVersion,
		HeaderType:        "dev.syncnode.control.checkpoint_declared.v1",
		HeaderSource:      "syncnode://node1",
		HeaderTime:        "2023-11-14T22:13:20.123Z",
		HeaderSubject:     "user=40example=2Ecom/proj",
		HeaderPartition:   p.Token(),
		HeaderEventName:   EventCheckpointDeclared,
		HeaderContentType: ContentTypeJSON,
	} {
		if got := m.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if id := m.Header.Get(HeaderID); id == "" || m.Header.Get(jetstream.MsgIDHeader) != id {
		t.Fatalf("ce-id %q and Nats-Msg-Id %q must be equal and set", id, m.Header.Get(jetstream.MsgIDHeader))
	}
	var body map[string]any
	if err := json.Unmarshal(m.Data, &body); err != nil || body["name"] != "proj" {
		t.Fatalf("body %s: %v", m.Data, err)
	}
	g, err := NewControlMsg(prod, "node1", ControlEvent{Event: EventSchemaMigrated, Time: at, Data: map[string]int{"schemaVersion": 2}})
	if err != nil || g.Subject != "syncctl.=global.schema_migrated" || g.Header.Get(HeaderPartition) != GlobalToken {
		t.Fatalf("global event: %v, %+v", err, g)
	}
}
