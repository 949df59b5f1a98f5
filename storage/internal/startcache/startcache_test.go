package startcache

import (
	"testing"

	"github.com/syncnode/syncnode/storage"
)

func part(id, epoch string) storage.Partition { return storage.Partition{ID: id, LogEpoch: epoch} }

func client(p, id, actor string, cursor int64) storage.Client {
	return storage.Client{Partition: p, ClientID: id, ActorID: actor, Cursor: cursor}
}

// A fill read before a drop or a significant write never lands after it.
func TestFillLosesToLaterWrites(t *testing.T) {
	var c Cache
	for _, w := range []struct {
		name  string
		write func()
	}{
		{"drop", func() { c.Drop("p") }},
		{"drop client", func() { c.DropClient("p", "c") }},
		{"clear", c.Clear},
		{"set client", func() { c.SetClient(c.Gen(), client("p", "c", "bob", 9)) }},
	} {
		c.Clear()
		c.Fill(c.Gen(), part("p", "e1"), storage.Client{}, false)
		gen := c.Gen() // a read begins
		w.write()
		c.Fill(gen, part("p", "e0"), client("p", "c", "alice", 1), true) // and ends
		if p, cl, ok := c.Get("p", "c"); ok && (p.LogEpoch == "e0" || cl.ActorID == "alice") {
			t.Fatalf("%s: the older read was filled over it: %+v %+v", w.name, p, cl)
		}
	}
}

func TestAdvance(t *testing.T) {
	var c Cache
	c.Fill(c.Gen(), part("p", "e1"), client("p", "c", "alice", 5), true)
	c.Advance(storage.ClientAckParams{Partition: "p", ClientID: "c", ActorID: "alice", LogEpoch: "e1", Cursor: 7, NowMs: 3})
	c.Advance(storage.ClientAckParams{Partition: "p", ClientID: "c", ActorID: "alice", LogEpoch: "e1", Cursor: 6, NowMs: 2})
	c.Advance(storage.ClientAckParams{Partition: "p", ClientID: "c", ActorID: "bob", LogEpoch: "e1", Cursor: 9})
	c.Advance(storage.ClientAckParams{Partition: "p", ClientID: "c", ActorID: "alice", LogEpoch: "e0", Cursor: 9})
	if _, cl, ok := c.Get("p", "c"); !ok || cl.Cursor != 7 || cl.UpdatedAtMs != 3 {
		t.Fatalf("after advances: %+v, %v", cl, ok)
	}
}

func TestSetClientNeedsPartition(t *testing.T) {
	var c Cache
	c.SetClient(c.Gen(), client("p", "c", "alice", 1))
	if c.Has("p", "c") {
		t.Fatal("a record cached without its partition row")
	}
	c.SetPartition(c.Gen(), part("p", "e1"))
	gen := c.Gen()
	c.Drop("q")
	c.SetClient(gen, client("p", "c", "alice", 1)) // stale: dropped, not set
	if c.Has("p", "c") {
		t.Fatal("a stale record was cached")
	}
	c.SetClient(c.Gen(), client("p", "c", "alice", 1))
	if !c.Has("p", "c") {
		t.Fatal("record not cached")
	}
}

func TestBounded(t *testing.T) {
	var c Cache
	for i := range MaxClients + 10 {
		c.Fill(c.Gen(), part("p", "e"), client("p", string(rune('a'+i%26))+string(rune(i)), "a", 0), true)
		if c.clients > MaxClients {
			t.Fatalf("%d clients cached", c.clients)
		}
	}
	for i := range MaxPartitions + 10 {
		c.Fill(c.Gen(), part(string(rune(i+1)), "e"), storage.Client{}, false)
		if len(c.parts) > MaxPartitions {
			t.Fatalf("%d partitions cached", len(c.parts))
		}
	}
}
