package querysql

import (
	"reflect"
	"testing"

	"github.com/syncnode/syncnode/storage"
)

// TestParseStart reads start rows — strings holding the separators, no
// client, no partition, NULL subscriptions — and refuses malformed ones.
func TestParseStart(t *testing.T) {
	for _, c := range []struct {
		text string
		has  bool
		want storage.RequestStart
	}{
		{"1,1,10,20,30,5,1,3,-1,40,4,4,5;e;,xa,;b[\";\"]", true, storage.RequestStart{
			Partition: storage.Partition{ID: "p", LogEpoch: "e;,x", EpochRequired: true, CreatedAtMs: 10, LastSeenMs: 20, MaxCommitSeq: 30, HorizonSeq: 5},
			HasClient: true,
			Client:    storage.Client{Partition: "p", ClientID: "c", ActorID: "a,;b", WireVersion: 3, Cursor: -1, UpdatedAtMs: 40, Subscriptions: []byte(`[";"]`)}}},
		{"1,0,10,20,0,0,1,2,7,40,1,1,-1;ea", true, storage.RequestStart{
			Partition: storage.Partition{ID: "p", LogEpoch: "e", CreatedAtMs: 10, LastSeenMs: 20},
			HasClient: true,
			Client:    storage.Client{Partition: "p", ClientID: "c", ActorID: "a", WireVersion: 2, Cursor: 7, UpdatedAtMs: 40}}},
		{"1,0,10,20,9,9,0,0,-1,0,1,0,-1;e", true, storage.RequestStart{
			Partition: storage.Partition{ID: "p", LogEpoch: "e", CreatedAtMs: 10, LastSeenMs: 20, MaxCommitSeq: 9, HorizonSeq: 9}}},
		{"0,0,0,0,0,0,0,0,-1,0,0,0,-1;", false, storage.RequestStart{}},
	} {
		st := storage.RequestStart{Partition: storage.Partition{ID: "stale"}, HasClient: true, Client: storage.Client{ActorID: "stale"}}
		has, err := ParseStart(c.text, "p", "c", &st)
		if err != nil || has != c.has || !reflect.DeepEqual(st, c.want) {
			t.Errorf("%q: %v %+v (%v), want %v %+v", c.text, has, st, err, c.has, c.want)
		}
	}
	for _, bad := range []string{
		"",
		"1,0,10,20,0,0,1,2,7,40,1,1,-1",        // no semicolon
		"1,0,10,20,0,0,1,2,7,40,1,1;ea",        // a field short
		"1,0,10,20,0,0,1,2,7,40,1,1,-1,0;ea",   // a field over
		"1,0,10,20,0,0,1,2,7,40,1,2,-1;ea",     // a length past the end
		"1,0,10,20,0,0,1,2,7,40,1,0,-1;ea",     // bytes left over
		"1,0,10,20,0,0,1,70000,7,40,1,1,-1;ea", // a wire version out of range
		"1,0,10,20,0,0,1,x,7,40,1,1,-1;ea",     // not a number
		"1,0,10,20,0,0,1,2,7,40,-1,1,-1;ea",    // a negative length
	} {
		if _, err := ParseStart(bad, "p", "c", &storage.RequestStart{}); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
