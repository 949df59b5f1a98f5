package bus

import (
	"errors"
	"strings"
	"testing"
)

// prod is the production namespace.
var prod Names

func mustPartition(t testing.TB, id string) Partition {
	t.Helper()
	p, err := NewPartition(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	p := mustPartition(t, "a.b")
	s, err := prod.CommitSubject(p, "todos")
	if err != nil || s != "sync.a=2Eb.commit.todos" {
		t.Errorf("CommitSubject = %q, %v", s, err)
	}
	if got := prod.PartitionCommits(p); got != "sync.a=2Eb.commit.>" {
		t.Errorf("PartitionCommits = %q", got)
	}
	if got, _ := prod.TableCommits("todos"); got != "sync.*.commit.todos" {
		t.Errorf("TableCommits = %q", got)
	}
	if got, _ := prod.ControlSubject(p, "epoch"); got != "syncctl.a=2Eb.epoch" {
		t.Errorf("ControlSubject = %q", got)
	}
	if got := GateKey(p); got != "gate.a=2Eb" {
		t.Errorf("GateKey = %q", got)
	}
	tok, table, ok := prod.ParseCommitSubject(s)
	if !ok || tok != "a=2Eb" || table != "todos" {
		t.Errorf("ParseCommitSubject(%q) = %q, %q, %v", s, tok, table, ok)
	}
	for _, bad := range []string{"sync.a.b.commit.t", "sync..commit.t", "sync.a.commit.", "sync.a.commit.1t", "sync.a.other.t", "x.a.commit.t", "sync.a"} {
		if _, _, ok := prod.ParseCommitSubject(bad); ok {
			t.Errorf("ParseCommitSubject(%q) accepted", bad)
		}
	}
}

// The production namespace keeps the historical names exactly; a
// prefixed one moves every stream, bucket and subject out of their way.
func TestNames(t *testing.T) {
	t.Parallel()
	p := mustPartition(t, "a.b")
	ns, err := NewNames("i-7f")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want string }{
		{prod.CommitStream(), "SYNC_COMMITS"}, {ns.CommitStream(), "i-7f_SYNC_COMMITS"},
		{prod.ControlStream(), "SYNC_CONTROL"}, {ns.ControlStream(), "i-7f_SYNC_CONTROL"},
		{prod.GateBucket(), "sync_gate"}, {ns.GateBucket(), "i-7f_sync_gate"},
		{prod.LeaseBucket(), "sync_leases"}, {ns.LeaseBucket(), "i-7f_sync_leases"},
		{prod.SegmentsBucket(), "sync_segments"}, {ns.SegmentsBucket(), "i-7f_sync_segments"},
		{prod.BlobsBucket(), "sync_blobs"}, {ns.BlobsBucket(), "i-7f_sync_blobs"},
		{prod.CommitSubjects(), "sync.*.commit.*"}, {ns.CommitSubjects(), "i-7f.sync.*.commit.*"},
		{prod.AllCommits(), "sync.>"}, {ns.AllCommits(), "i-7f.sync.>"},
		{prod.ControlSubjects(), "syncctl.>"}, {ns.ControlSubjects(), "i-7f.syncctl.>"},
		{prod.GlobalControl(), "syncctl.=global.>"}, {ns.GlobalControl(), "i-7f.syncctl.=global.>"},
		{prod.PartitionCommits(p), "sync.a=2Eb.commit.>"}, {ns.PartitionCommits(p), "i-7f.sync.a=2Eb.commit.>"},
		{ns.PartitionControl(p), "i-7f.syncctl.a=2Eb.>"},
		{ns.CommitsStreamConfig(StreamConfig{}).Subjects[0], "i-7f.sync.*.commit.*"},
		{ns.GateBucketConfig(1).Bucket, "i-7f_sync_gate"},
		{prod.ReactionWork(), "syncreact.work.>"}, {ns.ReactionWork(), "i-7f.syncreact.work.>"},
		{prod.ReactionEvents(), "syncreact.event.>"}, {ns.ReactionEvents(), "i-7f.syncreact.event.>"},
		{prod.Presence(), "syncrt.*.presence"}, {ns.Presence(), "i-7f.syncrt.*.presence"},
		{ns.PresenceAlive(), "i-7f.syncrt.=node.alive"}, {ns.PresenceSync(), "i-7f.syncrt.=node.sync"},
		{ns.PresenceSubject(p), "i-7f.syncrt.a=2Eb.presence"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	s, err := ns.CommitSubject(p, "todos")
	if err != nil || s != "i-7f.sync.a=2Eb.commit.todos" {
		t.Fatalf("CommitSubject = %q, %v", s, err)
	}
	if tok, table, ok := ns.ParseCommitSubject(s); !ok || tok != "a=2Eb" || table != "todos" {
		t.Errorf("ParseCommitSubject(%q) = %q, %q, %v", s, tok, table, ok)
	}
	// Each namespace reads only its own subjects.
	if _, _, ok := prod.ParseCommitSubject(s); ok {
		t.Errorf("the production namespace parsed %q", s)
	}
	if _, _, ok := ns.ParseCommitSubject("sync.a.commit.todos"); ok {
		t.Error("a prefixed namespace parsed a production subject")
	}
	ev, err := ns.ReactionEventSubject(p, ReactionCompleted, "email.send")
	if err != nil || ev != "i-7f.syncreact.event.a=2Eb.completed.email.send" {
		t.Fatalf("ReactionEventSubject = %q, %v", ev, err)
	}
	if tok, _, typ, ok := ns.ParseReactionEventSubject(ev); !ok || tok != "a=2Eb" || typ != "email.send" {
		t.Errorf("ParseReactionEventSubject(%q) = %q, %q, %v", ev, tok, typ, ok)
	}
	if _, _, _, ok := prod.ParseReactionEventSubject(ev); ok {
		t.Errorf("the production namespace parsed %q", ev)
	}
	other, _ := NewNames("i-80")
	if _, _, ok := other.ParseCommitSubject(s); ok {
		t.Errorf("namespace i-80 parsed %q", s)
	}
	if got, err := NewNames(""); err != nil || got != prod {
		t.Errorf(`NewNames("") = %v, %v; want the production namespace`, got, err)
	}
	for _, bad := range []string{"sync", "syncctl", "syncreact", "syncrt", "syncnode", "a.b", "a b", "*", ">", "é", strings.Repeat("x", MaxNamespaceLen+1)} {
		if _, err := NewNames(bad); !errors.Is(err, ErrInvalidNamespace) {
			t.Errorf("NewNames(%q) = %v, want ErrInvalidNamespace", bad, err)
		}
	}
}

func TestCheckTable(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"todos", "_x", "T1", strings.Repeat("a", 63)} {
		if err := CheckTable(ok); err != nil {
			t.Errorf("CheckTable(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1t", "a.b", "a*", ">", "a b", "é", strings.Repeat("a", 64)} {
		if err := CheckTable(bad); !errors.Is(err, ErrInvalidTable) {
			t.Errorf("CheckTable(%q) = %v, want ErrInvalidTable", bad, err)
		}
		if _, err := prod.CommitSubject(mustPartition(t, "p"), bad); !errors.Is(err, ErrInvalidTable) {
			t.Errorf("CommitSubject(table %q) = %v, want ErrInvalidTable", bad, err)
		}
	}
	for _, bad := range []string{"", "a.b", "A", "*", strings.Repeat("a", 65)} {
		if _, err := prod.ControlSubject(mustPartition(t, "p"), bad); !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("ControlSubject(event %q) = %v, want ErrInvalidEvent", bad, err)
		}
	}
}

func TestCheckNode(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"node-1", "eu.west_2", "N"} {
		if err := CheckNode(ok); err != nil {
			t.Errorf("CheckNode(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "a/b", "*", ">", "é", "a:b"} {
		if err := CheckNode(bad); !errors.Is(err, ErrInvalidNode) {
			t.Errorf("CheckNode(%q) = %v, want ErrInvalidNode", bad, err)
		}
	}
}
