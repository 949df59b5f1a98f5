package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// refSchema: docs cascade from folders, comments from docs, tags are
// set null, locks restrict.
const refSchema = `{"version":1,"tables":[
 {"name":"folders","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
  {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"name","type":"string","nullable":true}]},
 {"name":"docs","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
  {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"folder_id","type":"string","nullable":true},
  {"name":"title","type":"string","nullable":true}],
  "references":[{"column":"folder_id","parentTable":"folders","onDelete":"CASCADE"}],
  "indexes":[{"name":"docs_folder_id","columns":["folder_id"]}]},
 {"name":"comments","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
  {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"doc_id","type":"string"}],
  "references":[{"column":"doc_id","parentTable":"docs","onDelete":"CASCADE"}]},
 {"name":"tags","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
  {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"folder_id","type":"string","nullable":true},
  {"name":"label","type":"string","nullable":true}],
  "references":[{"column":"folder_id","parentTable":"folders","onDelete":"SET NULL"}]},
 {"name":"locks","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
  {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"folder_id","type":"string"}],
  "references":[{"column":"folder_id","parentTable":"folders"}]}]}`

type refs struct {
	*v3
}

func newRefs(t testing.TB, open func(testing.TB) storage.Store, mod func(*Config)) *refs {
	t.Helper()
	return &refs{newV3(t, open, refSchema, "folders", mod)}
}

// put builds a whole-row v3 upsert of table.
func (h *refs) put(table string, cols map[string]any) ssp2.Operation {
	h.t.Helper()
	tb, _ := h.schema.Table(table)
	all := map[string]any{"project_id": "p1"}
	for _, c := range tb.Columns {
		if _, ok := cols[c.Name]; !ok && c.Name != "project_id" {
			all[c.Name] = nil
		}
	}
	for k, v := range cols {
		all[k] = v
	}
	return op(tb, all["id"].(string), sparse(h.t, tb, all))
}

func (h *refs) del(table, rowID string) ssp2.Operation {
	tb, _ := h.schema.Table(table)
	return delOp(tb, rowID)
}

// violation asserts a reference violation at opIndex with details.
func (h *refs) violation(opIndex int32, reason string, fields []string, references map[string]string, ops ...ssp2.Operation) {
	h.t.Helper()
	res, d := h.push(3, alice, "c", ops...)
	if res.Status != ssp2.PushRejected || len(res.Results) != 1 || res.Results[0].Code != string(ssp2.CodeReferenceViolation) ||
		res.Results[0].OpIndex != opIndex || res.Results[0].Message != "a declared reference is violated" {
		h.t.Fatalf("push = %+v, want a reference violation at operation %d", res, opIndex)
	}
	if d == nil || len(d.Entries) != 1 || d.Entries[0].OpIndex != opIndex {
		h.t.Fatalf("details = %+v, want one entry for operation %d", d, opIndex)
	}
	var got RejectionDetails
	if err := json.Unmarshal(d.Entries[0].DetailsJSON, &got); err != nil {
		h.t.Fatal(err)
	}
	if got.Reason != reason || !slices.Equal(got.FieldPaths, fields) || fmt.Sprint(got.References) != fmt.Sprint(references) {
		h.t.Fatalf("details = %s, want reason %s, fieldPaths %v, references %v", d.Entries[0].DetailsJSON, reason, fields, references)
	}
}

func (h *refs) exists(table, rowID string) bool {
	h.t.Helper()
	tb, _ := h.schema.Table(table)
	_, _, ok := h.row(tb, rowID)
	return ok
}

func TestReferencesMissingParent(t *testing.T) {
	forStores(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		h := newRefs(t, open, nil)
		h.violation(1, reasonMissingParent, []string{"folder_id"}, map[string]string{"parent": "folders", "row": "F9"},
			h.put("folders", map[string]any{"id": "F1"}), h.put("docs", map[string]any{"id": "D1", "folder_id": "F9"}))
		if h.exists("folders", "F1") {
			t.Fatal("a refused commit wrote its parent")
		}
		// Parent and child in one commit, in either order; NULL references nothing.
		h.applied(3, alice, "c", h.put("docs", map[string]any{"id": "D1", "folder_id": "F1"}), h.put("folders", map[string]any{"id": "F1"}),
			h.put("docs", map[string]any{"id": "D0"}))
		// A patch that does not present the reference is not checked; one that does is.
		docs, _ := h.schema.Table("docs")
		h.applied(3, alice, "c", op(docs, "D1", sparse(t, docs, map[string]any{"id": "D1", "title": "x"})))
		h.violation(0, reasonMissingParent, []string{"folder_id"}, map[string]string{"parent": "folders", "row": "F2"},
			op(docs, "D1", sparse(t, docs, map[string]any{"id": "D1", "folder_id": "F2"})))
		// v2 full rows present every column.
		h.refused(ssp2.CodeReferenceViolation, 2, alice, "v2", op(docs, "D2", full(t, docs, map[string]any{"id": "D2", "project_id": "p1", "folder_id": "F2"})))
	})
}

func TestReferencesOnDelete(t *testing.T) {
	forStores(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		h := newRefs(t, open, nil)
		h.applied(3, alice, "c",
			h.put("folders", map[string]any{"id": "F1"}), h.put("folders", map[string]any{"id": "F2"}),
			h.put("locks", map[string]any{"id": "L1", "folder_id": "F1"}),
			h.put("docs", map[string]any{"id": "D1", "folder_id": "F2"}), h.put("docs", map[string]any{"id": "D2", "folder_id": "F2"}),
			h.put("docs", map[string]any{"id": "D3", "folder_id": "F1"}),
			h.put("comments", map[string]any{"id": "C1", "doc_id": "D1"}), h.put("comments", map[string]any{"id": "C3", "doc_id": "D3"}),
			h.put("tags", map[string]any{"id": "T1", "folder_id": "F2", "label": "red"}))

		// RESTRICT refuses a parent delete with children, and a commit that
		// deletes them together passes.
		h.violation(1, reasonRestrictedDelete, nil, map[string]string{"child": "locks"},
			h.put("folders", map[string]any{"id": "F3"}), h.del("folders", "F1"))
		if !h.exists("docs", "D3") || h.exists("folders", "F3") {
			t.Fatal("a refused delete changed rows")
		}
		h.applied(3, alice, "c", h.del("folders", "F1"), h.del("locks", "L1"))
		if h.exists("docs", "D3") || h.exists("comments", "C3") {
			t.Fatal("F1's cascade did not delete D3 and its comment C3")
		}

		// CASCADE deletes the subtree, SET NULL clears the reference; every
		// appended operation is a change of the commit.
		seq := h.applied(3, alice, "c", h.del("folders", "F2"))
		for _, r := range []string{"docs/D1", "docs/D2", "comments/C1", "folders/F2"} {
			if table, id, _ := strings.Cut(r, "/"); h.exists(table, id) {
				t.Fatalf("%s survived the cascade", r)
			}
		}
		tags, _ := h.schema.Table("tags")
		h.wantRow(tags, "T1", 2, map[string]any{"folder_id": nil, "label": "red"})
		m := h.sync(alice, 3, hdr("puller", h.ep), &ssp2.PullHeader{Accept: 3},
			&ssp2.Subscription{ID: "d", Table: "docs", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: seq - 1},
			&ssp2.Subscription{ID: "c", Table: "comments", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: seq - 1},
			&ssp2.Subscription{ID: "t", Table: "tags", Scopes: map[string][]string{"project_id": {"p1"}}, Cursor: seq - 1})
		var got []string
		for _, c := range frames[*ssp2.Commit](m) {
			if c.CommitSeq != seq {
				t.Fatalf("pulled commit %d, want only %d", c.CommitSeq, seq)
			}
			for _, ch := range c.Changes {
				got = append(got, fmt.Sprintf("%s %s/%s %v", ch.Op, c.Tables[ch.TableIndex], ch.RowID, ch.Scopes))
			}
		}
		want := []string{"delete docs/D1 map[project_id:p1]", "delete docs/D2 map[project_id:p1]",
			"delete comments/C1 map[project_id:p1]", "upsert tags/T1 map[project_id:p1]"}
		if !slices.Equal(got, want) {
			t.Fatalf("pulled changes %v, want %v", got, want)
		}
		// Cascaded deletes leave tombstones; SET NULL moved only its column.
		docs, _ := h.schema.Table("docs")
		h.refused(ssp2.CodeRowDeleted, 3, alice, "late", op(docs, "D2", sparse(t, docs, map[string]any{"id": "D2", "title": "late"})))
		h.applied(3, alice, "late", op(tags, "T1", sparse(t, tags, map[string]any{"id": "T1", "label": "blue"}), 1))
		h.refused(ssp2.CodeVersionConflict, 3, alice, "late", op(tags, "T1", sparse(t, tags, map[string]any{"id": "T1", "folder_id": nil}), 1))
	})
}

func TestReferencesCascadeLimit(t *testing.T) {
	forStores(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		h := newRefs(t, open, func(c *Config) { c.CascadeLimit = 3 })
		ops := []ssp2.Operation{h.put("folders", map[string]any{"id": "F1"}), h.put("folders", map[string]any{"id": "F2"})}
		for i := range 3 {
			ops = append(ops, h.put("docs", map[string]any{"id": fmt.Sprint("D", i), "folder_id": "F1"}))
		}
		ops = append(ops, h.put("docs", map[string]any{"id": "E0", "folder_id": "F2"}), h.put("comments", map[string]any{"id": "C0", "doc_id": "E0"}))
		ops = append(ops, h.put("docs", map[string]any{"id": "E1", "folder_id": "F2"}), h.put("comments", map[string]any{"id": "C1", "doc_id": "E1"}))
		h.applied(3, alice, "c", ops...)
		h.applied(3, alice, "c", h.del("folders", "F1")) // three appended deletes: at the cap
		// Two docs and their two comments: over it, refused whole.
		h.violation(0, reasonCascadeLimit, nil, nil, h.del("folders", "F2"))
		for _, id := range []string{"E0", "E1"} {
			if !h.exists("docs", id) {
				t.Fatalf("docs/%s went with a refused commit", id)
			}
		}
		if !h.exists("comments", "C0") || !h.exists("folders", "F2") {
			t.Fatal("a refused cascade changed rows")
		}
	})
}

func TestReferencesAppendedOperationsAreValidated(t *testing.T) {
	var evidence []OperationEvidence
	h := newRefs(t, openSQLite, func(c *Config) {
		c.Validators = map[string]RowValidator{"docs": func(_ context.Context, v RowValidation) error {
			if v.Op == ssp2.OpDelete && v.Stored["title"] == "keep" {
				return Reject("app.keep", "this doc stays")
			}
			return nil
		}}
		c.CommitValidator = func(_ context.Context, v CommitValidation) error {
			evidence = v.Operations
			return nil
		}
	})
	h.applied(3, alice, "c", h.put("folders", map[string]any{"id": "F1"}), h.put("folders", map[string]any{"id": "F2"}),
		h.put("docs", map[string]any{"id": "D1", "folder_id": "F1", "title": "keep"}),
		h.put("docs", map[string]any{"id": "D2", "folder_id": "F2"}), h.put("tags", map[string]any{"id": "T1", "folder_id": "F2"}))
	res := h.refused("app.keep", 3, alice, "c", h.put("folders", map[string]any{"id": "F3"}), h.del("folders", "F1"))
	if res.OpIndex != 1 {
		t.Fatalf("rejection at operation %d, want the originating delete (1)", res.OpIndex)
	}
	h.applied(3, alice, "c", h.del("folders", "F2"))
	var got []string
	for _, e := range evidence {
		got = append(got, fmt.Sprintf("%d %s %s/%s %v", e.OpIndex, e.Op, e.Table, e.RowID, e.Appended))
	}
	want := []string{"0 delete folders/F2 false", "0 delete docs/D2 true", "0 upsert tags/T1 true"}
	if !slices.Equal(got, want) {
		t.Fatalf("commit evidence %v, want %v", got, want)
	}
	if evidence[2].Row["folder_id"] != nil || *evidence[2].NextServerVersion != 2 {
		t.Fatalf("SET NULL evidence = %+v", evidence[2])
	}
}
