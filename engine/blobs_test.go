package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

const fileSchema = `{"version":1,"tables":[{"name":"files","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"att","type":"blob_ref","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

func testBlobID(n int) string { return fmt.Sprintf("sha256:%064x", n) }

func testBlobRef(n int) string {
	return fmt.Sprintf(`{"blobId":"%s","byteLength":%d}`, testBlobID(n), n)
}

func holdBlob(t *testing.T, st storage.Store, part string, n int) {
	t.Helper()
	_, _, err := st.BlobPut(context.Background(), storage.Blob{Partition: part, ID: testBlobID(n), ByteLength: int64(n),
		Object: fmt.Sprintf("o%d", n), UploadedAtMs: 1})
	if err != nil {
		t.Fatal(err)
	}
}

// A push whose row references a blob the partition does not hold is
// rejected whole with blob.not_found (SPEC.md §5.9.6), on every wire
// version and both stores; once uploaded the same push applies, and the
// download is authorized by the referencing row's scopes (§5.9.5).
func TestBlobReferences(t *testing.T) {
	forStores(t, func(t *testing.T, open func(testing.TB) storage.Store) {
		h := newV3(t, open, fileSchema, "files", nil)
		alice := id("alice", "p1")
		for _, wire := range []uint16{2, 3} {
			row := fmt.Sprintf("f%d", wire)
			payload := full(t, h.table, map[string]any{"id": row, "project_id": "p1", "att": testBlobRef(int(wire))})
			if wire == 3 {
				payload = sparse(t, h.table, map[string]any{"id": row, "project_id": "p1", "att": testBlobRef(int(wire))})
			}
			// Another row referencing a held blob in the same commit
			// rolls back with it.
			holdBlob(t, h.store, "p", 100+int(wire))
			other := full(t, h.table, map[string]any{"id": row + "x", "project_id": "p1", "att": testBlobRef(100 + int(wire))})
			if wire == 3 {
				other = sparse(t, h.table, map[string]any{"id": row + "x", "project_id": "p1", "att": testBlobRef(100 + int(wire))})
			}
			res, _ := h.push(wire, alice, "c", op(h.table, row+"x", other), op(h.table, row, payload))
			if res.Status != ssp2.PushRejected || len(res.Results) != 1 || res.Results[0].Code != string(ssp2.CodeBlobNotFound) || res.Results[0].OpIndex != 1 {
				t.Fatalf("wire %d: push of a missing blob = %+v", wire, res)
			}
			if _, err := h.e.AuthorizeBlob(context.Background(), alice, testBlobID(100+int(wire))); ssp2.CodeOf(err) != ssp2.CodeBlobForbidden {
				t.Fatalf("wire %d: the rolled-back commit left a reference: %v", wire, err)
			}
			holdBlob(t, h.store, "p", int(wire))
			res, _ = h.push(wire, alice, "c", op(h.table, row, payload))
			if res.Status != ssp2.PushApplied {
				t.Fatalf("wire %d: push after upload = %+v", wire, res)
			}
			if _, err := h.e.AuthorizeBlob(context.Background(), alice, testBlobID(int(wire))); err != nil {
				t.Fatalf("wire %d: AuthorizeBlob(alice) = %v", wire, err)
			}
		}

		ctx := context.Background()
		for _, c := range []struct {
			who  Identity
			blob string
			want ssp2.Code
		}{
			{id("bob", "p2"), testBlobID(2), ssp2.CodeBlobForbidden},
			{id("carol", Wildcard), testBlobID(2), ""},
			{Identity{Partition: "p", ActorID: "dan", Scopes: ResolverFunc(func(context.Context, string, string) (Allowed, error) {
				return nil, fmt.Errorf("resolver down")
			})}, testBlobID(2), ssp2.CodeBlobForbidden},
			{alice, testBlobID(9), ssp2.CodeBlobNotFound},
			{alice, "sha256:nope", ssp2.CodeBlobNotFound},
			// Blobs are per partition.
			{Identity{Partition: "q", ActorID: "alice", Scopes: StaticScopes{"project_id": {Wildcard}}}, testBlobID(2), ssp2.CodeBlobNotFound},
		} {
			_, err := h.e.AuthorizeBlob(ctx, c.who, c.blob)
			if ssp2.CodeOf(err) != c.want {
				t.Errorf("AuthorizeBlob(%s, %s) = %v, want %q", c.who.ActorID, c.blob, err, c.want)
			}
		}

		// Deleting the referencing row revokes the download.
		res, _ := h.push(3, alice, "c", delOp(h.table, "f2"))
		if res.Status != ssp2.PushApplied {
			t.Fatalf("delete = %+v", res)
		}
		if _, err := h.e.AuthorizeBlob(ctx, alice, testBlobID(2)); ssp2.CodeOf(err) != ssp2.CodeBlobForbidden {
			t.Fatalf("AuthorizeBlob after delete = %v, want blob.forbidden", err)
		}
	})
}
