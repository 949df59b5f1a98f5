package edge_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/internal/proxytest"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/storage"
)

// blobSchemaJSON is nodetest's todos plus files, whose att column is a
// blob_ref.
const blobSchemaJSON = `{"version": 1, "tables": [
 {"name": "todos", "primaryKey": "id", "scopes": ["project:{project_id}"],
  "columns": [
   {"name": "id", "type": "string"},
   {"name": "project_id", "type": "string"},
   {"name": "title", "type": "string"},
   {"name": "done", "type": "boolean"}]},
 {"name": "files", "primaryKey": "id", "scopes": ["project:{project_id}"],
  "columns": [
   {"name": "id", "type": "string"},
   {"name": "project_id", "type": "string"},
   {"name": "att", "type": "blob_ref", "nullable": true}]}]}`

func blobSchema(t testing.TB) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(blobSchemaJSON))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startBlobTopology is startTopology with the files table on both sides.
func startBlobTopology(t testing.TB) *topology {
	t.Helper()
	sc := blobSchema(t)
	withFiles := func(c *node.Config) { c.Schema = sc }
	tp := &topology{t: t, hubDir: t.TempDir(), edgeDir: t.TempDir()}
	tp.hub = startHub(t, tp.hubDir, withFiles)
	tp.px = proxytest.Start(t, trimLeaf(tp.hub.NATS.LeafURL()))
	tp.edg = startEdge(t, tp.edgeDir, "nats-leaf://"+tp.px.Addr(), withFiles)
	tp.waitLink(true)
	return tp
}

// putBlob stores data in the node's blob store for the partition, as an
// upload does, and returns its id.
func putBlob(t testing.TB, n *node.Node, partition string, data []byte) string {
	t.Helper()
	sum := sha256.Sum256(data)
	id := "sha256:" + hex.EncodeToString(sum[:])
	if _, err := n.Blobs.Put(context.Background(), storage.BlobUpload{Partition: partition, BlobID: id, MediaType: "text/plain",
		Declared: int64(len(data)), Body: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	return id
}

// download is GET /blobs/{id} at n for alice of the partition.
func download(t testing.TB, n *node.Node, partition, id string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, n.URL()+"/blobs/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+nodetest.Token(t, "alice", partition, map[string][]string{"project_id": {project}}))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestReplicaFetchesEdgeBlobs: rows of an edge partition that reference
// blobs — pushed while linked, and while cut off — reach the hub's
// replica with the blobs: the hub reads each from the edge's Object
// Store before it applies the row, and serves the download itself, with
// the link cut again.
func TestReplicaFetchesEdgeBlobs(t *testing.T) {
	tp := startBlobTopology(t)
	ctx := context.Background()
	sc := blobSchema(t)
	tok := nodetest.Token(t, "alice", edgePart, map[string][]string{"project_id": {project}})
	writer, err := client.New(client.Config{BaseURL: tp.edg.URL(), Token: tok, Schema: sc, Store: &client.MemoryStore{}, ClientID: "edge-writer"})
	if err != nil {
		t.Fatal(err)
	}
	if err := writer.Subscribe("files", "files", map[string][]string{"project_id": {project}}); err != nil {
		t.Fatal(err)
	}
	syncOK(t, writer)
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB: many chunks
	blobs := map[string][]byte{}
	push := func(name string, data []byte) {
		id := putBlob(t, tp.edg, edgePart, data)
		blobs[id] = data
		ref := json.RawMessage(fmt.Sprintf(`{"blobId":%q,"byteLength":%d}`, id, len(data)))
		if _, err := writer.Upsert(ctx, "files", map[string]any{"id": name, "project_id": project, "att": ref}); err != nil {
			t.Fatal(err)
		}
		syncOK(t, writer)
	}
	push("linked", []byte("pushed while linked"))
	tp.waitReplica(edgePart)

	tp.cut()
	push("offline", big)
	push("offline-2", []byte("another, while cut"))
	tp.restore()
	tp.waitReplica(edgePart)

	tp.cut() // the hub serves the bytes it holds
	for id, data := range blobs {
		code, got := download(t, tp.hub, edgePart, id)
		if code != http.StatusOK || !bytes.Equal(got, data) {
			t.Fatalf("hub download of %s: HTTP %d, %d bytes, want %d bytes", id, code, len(got), len(data))
		}
	}
	if got := tp.hub.EdgeHub.Metrics().BlobsFetched.Load(); got != 3 {
		t.Fatalf("hub fetched %d blobs, want 3", got)
	}

	// A replica rebuilt from a snapshot (the edge pruned the commits
	// that referenced these blobs) fetches them with the rows.
	push("pruned", []byte("referenced by a pruned commit"))
	push("pruned-2", []byte("so is this one"))
	ep, err := tp.edg.Store.PartitionGet(ctx, edgePart)
	if err != nil {
		t.Fatal(err)
	}
	pruneEdge(t, tp, ep.MaxCommitSeq)
	tp.restore()
	tp.waitReplicaEpoch(edgePart)
	if got := tp.hub.EdgeHub.Metrics().Snapshots.Load(); got != 1 {
		t.Fatalf("%d snapshot rebuilds, want 1", got)
	}
	tp.cut()
	for id, data := range blobs {
		code, got := download(t, tp.hub, edgePart, id)
		if code != http.StatusOK || !bytes.Equal(got, data) {
			t.Fatalf("hub download of %s after the snapshot: HTTP %d, %d bytes, want %d bytes", id, code, len(got), len(data))
		}
	}
	sameRowsOf(t, "files", tp.edg.Store, tp.hub.Store)
	if st := tp.link(); strings.Contains(fmt.Sprint(st.Partitions), "blob") {
		t.Fatalf("replica reports a blob error: %+v", st.Partitions)
	}
}

// sameRowsOf compares one table of the edge partition on both sides.
func sameRowsOf(t testing.TB, table string, edgeStore, hubStore storage.Store) {
	t.Helper()
	list := func(st storage.Store) []storage.Row {
		out, err := st.RowList(context.Background(), storage.RowListParams{Partition: edgePart, Table: table, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	sameRows(t, list(edgeStore), list(hubStore))
}
