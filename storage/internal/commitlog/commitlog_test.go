package commitlog

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

func TestScopesJSONRoundTrip(t *testing.T) {
	for _, m := range []map[string]string{
		{},
		{"project": "p1"},
		{"b": "2", "a": "1", "c": ""},
		{"q": `quote " backslash \ tab 	 nl` + "\n\x00\x1f", "u": "héllo ☃ 𝄞", "bad": "\xff\xfe"},
	} {
		b := AppendScopesJSON(nil, m)
		var std map[string]string
		if err := json.Unmarshal(b, &std); err != nil {
			t.Fatalf("%q is not JSON: %v", b, err)
		}
		got, err := ParseScopesJSON(b)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, std) {
			t.Fatalf("ParseScopesJSON(%s) = %v, encoding/json says %v", b, got, std)
		}
		if want, _ := json.Marshal(m); m["bad"] == "" && string(want) != string(b) {
			t.Fatalf("AppendScopesJSON = %s, encoding/json writes %s", b, want)
		}
	}
}

func FuzzParseScopesJSON(f *testing.F) {
	f.Add([]byte(`{"a":"b"}`))
	f.Add([]byte(`{"a":"b\"c"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseScopesJSON(b)
		var std map[string]string
		stdErr := json.Unmarshal(b, &std)
		if (err == nil) != (stdErr == nil) {
			// The fast path accepts only what encoding/json accepts.
			if err == nil && stdErr != nil {
				t.Fatalf("ParseScopesJSON accepted %q that encoding/json refuses: %v", b, stdErr)
			}
			return
		}
		if err == nil && !maps.Equal(got, std) {
			t.Fatalf("ParseScopesJSON(%q) = %v, want %v", b, got, std)
		}
	})
}

func TestIndexEntriesDeduplicated(t *testing.T) {
	changes := []storage.Change{
		{Table: "t", Scopes: map[string]string{"p": "1", "o": "x"}},
		{Table: "t", Scopes: map[string]string{"p": "1", "o": "y"}},
		{Table: "u", Scopes: map[string]string{"p": "1"}},
	}
	got := IndexEntries(nil, changes)
	want := []IndexEntry{{"t", "o", "x"}, {"t", "o", "y"}, {"t", "p", "1"}, {"u", "p", "1"}}
	if len(got) != len(want) {
		t.Fatalf("IndexEntries = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("IndexEntries = %v, want %v", got, want)
		}
	}
}

type fakeReader struct {
	floor      int64
	hasFloor   bool
	firstYoung int64 // 0: none
}

func (f fakeReader) MinActiveCursor(context.Context, int64) (int64, bool, error) {
	return f.floor, f.hasFloor, nil
}

func (f fakeReader) FirstCommitAtOrAfter(_ context.Context, after, through, _ int64) (int64, bool, error) {
	if f.firstYoung > after && f.firstYoung <= through {
		return f.firstYoung, true, nil
	}
	return 0, false, nil
}

func TestPruneTarget(t *testing.T) {
	part := storage.Partition{LogEpoch: "e", MaxCommitSeq: 100, HorizonSeq: 10}
	base := storage.PruneParams{LogEpoch: "e", ThroughSeq: 100, MinRetainedCommits: 5}
	cases := []struct {
		name string
		p    storage.PruneParams
		r    fakeReader
		want int64
		code ssp2.Code
	}{
		{"retention floor", base, fakeReader{}, 95, ""},
		{"request below floor", storage.PruneParams{LogEpoch: "e", ThroughSeq: 50, MinRetainedCommits: 5}, fakeReader{}, 50, ""},
		{"below horizon", storage.PruneParams{LogEpoch: "e", ThroughSeq: 5, MinRetainedCommits: 5}, fakeReader{}, 10, ""},
		{"active client", base, fakeReader{floor: 40, hasFloor: true, firstYoung: 41}, 40, ""},
		{"active client behind horizon", base, fakeReader{floor: 3, hasFloor: true, firstYoung: 11}, 10, ""},
		{"age force", base, fakeReader{floor: 40, hasFloor: true, firstYoung: 70}, 69, ""},
		{"age force through all", base, fakeReader{floor: 40, hasFloor: true}, 95, ""},
		{"epoch", storage.PruneParams{LogEpoch: "x", ThroughSeq: 1}, fakeReader{}, 0, ssp2.CodeStoragePruneEpochMismatch},
		{"cursor", storage.PruneParams{LogEpoch: "e", ThroughSeq: 101}, fakeReader{}, 0, ssp2.CodeStorageInvalidPruneCursor},
	}
	for _, tc := range cases {
		p, err := NormalizePrune(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := PruneTarget(context.Background(), p, part, tc.r)
		if ssp2.CodeOf(err) != tc.code || got != tc.want {
			t.Errorf("%s: PruneTarget = %d, %v; want %d, %q", tc.name, got, err, tc.want, tc.code)
		}
	}
}

func TestTombstones(t *testing.T) {
	ch := func(table, row string, op storage.Op) storage.Change {
		return storage.Change{Table: table, RowID: row, Op: op}
	}
	got := Tombstones(nil, []storage.Change{
		ch("a", "1", storage.OpDelete), ch("a", "2", storage.OpDelete), ch("b", "1", storage.OpUpsert),
		ch("a", "2", storage.OpUpsert), ch("b", "1", storage.OpDelete), ch("a", "1", storage.OpDelete),
	})
	want := []Tombstone{{"b", "1"}, {"a", "1"}}
	if !slices.Equal(got, want) {
		t.Fatalf("Tombstones = %v, want %v (last change a delete, once each, in order)", got, want)
	}
	if got := Tombstones(got, []storage.Change{ch("a", "1", storage.OpUpsert)}); len(got) != 0 {
		t.Fatalf("Tombstones of upserts = %v", got)
	}
}
