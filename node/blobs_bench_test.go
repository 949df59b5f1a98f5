package node_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/syncnode/syncnode/blobs"
	"github.com/syncnode/syncnode/internal/nodetest"
	"github.com/syncnode/syncnode/internal/rusage"
	"github.com/syncnode/syncnode/node"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

const benchBlobSchema = `{"version":1,"tables":[{"name":"files","columns":[
	{"name":"id","type":"string"},
	{"name":"project_id","type":"string"},
	{"name":"att","type":"blob_ref","nullable":true}],
	"primaryKey":"id","scopes":["project:{project_id}"]}]}`

// BenchmarkBlobs measures blob upload (PUT /blobs/{id}) and download
// (GET /blobs/{id}) over HTTP against a raw Object Store put and get of
// the same bytes on the same embedded server, with the same chunk size
// (issue 13: within 2×). Besides wall time each reports cpu-ms/op, the
// process's CPU time (client, node and NATS server alike) per operation
// while the timer runs, which other load on a shared machine does not
// inflate.
func BenchmarkBlobs(b *testing.B) {
	sc, err := schema.Parse([]byte(benchBlobSchema))
	if err != nil {
		b.Fatal(err)
	}
	grace := time.Duration(0)
	n := nodetest.Start(b, func(c *node.Config) {
		c.Schema = sc
		c.Blobs = blobs.Config{MaxBytes: 64 << 20, OrphanGrace: &grace, SweepInterval: -1}
		// Presigned only in the presigned-* runs.
		c.SignedURLs = node.SignedURLsConfig{Key: bytes.Repeat([]byte("k"), 32)}
		c.Engine.BlobPresign = new(false)
	})
	tok := nodetest.Token(b, "alice", "acme", map[string][]string{"project_id": {"p1"}})
	ctx := context.Background()
	js := n.NATS.JetStream()
	raw, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "bench_raw", Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	send := func(req *http.Request) []byte {
		if req.URL.Query().Get("st") == "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var out []byte
		if resp.Header.Get("Content-Type") == "application/json" {
			out, err = io.ReadAll(resp.Body)
		} else {
			_, err = io.Copy(io.Discard, resp.Body)
		}
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s %s: %d", req.Method, req.URL.Path, resp.StatusCode)
		}
		return out
	}
	// presigned is the url of a {url, urlExpiresAtMs} answer.
	presigned := func(answer []byte) string {
		var g struct{ URL string }
		if err := json.Unmarshal(answer, &g); err != nil || g.URL == "" {
			b.Fatalf("no url in %s (%v)", answer, err)
		}
		return g.URL
	}
	presign := func(on bool) {
		if err := n.Engine.SetBlobPresign(on); err != nil {
			b.Fatal(err)
		}
	}
	idOf := func(data []byte) string {
		sum := sha256.Sum256(data)
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	chunk := &jetstream.ObjectMetaOptions{ChunkSize: blobs.DefaultChunkSize}

	for _, size := range []int{1 << 20, 50 << 20} {
		data := make([]byte, size)
		for i := 0; i < size; i += 8 {
			binary.LittleEndian.PutUint64(data[i:], uint64(i)*0x9E3779B97F4A7C15)
		}
		label := fmt.Sprintf("%dMB", size>>20)

		b.Run("upload/"+label, func(b *testing.B) {
			b.SetBytes(int64(size))
			cpu := startCPU(b)
			for i := 0; b.Loop(); i++ {
				cpu.stop()
				binary.LittleEndian.PutUint64(data, uint64(i)) // a new blob each time
				id := idOf(data)
				cpu.start()
				req, _ := http.NewRequest(http.MethodPut, n.URL()+"/blobs/"+id, bytes.NewReader(data))
				send(req)
				cpu.stop()
				if _, err := n.Blobs.Sweep(ctx); err != nil { // unreferenced: deleted
					b.Fatal(err)
				}
				cpu.start()
			}
			cpu.report()
		})
		// The grant, then the PUT to its url without credentials.
		b.Run("presigned-upload/"+label, func(b *testing.B) {
			presign(true)
			defer presign(false)
			b.SetBytes(int64(size))
			cpu := startCPU(b)
			for i := 0; b.Loop(); i++ {
				cpu.stop()
				binary.LittleEndian.PutUint64(data, uint64(i)^1<<62) // a new blob each time
				id := idOf(data)
				cpu.start()
				req, _ := http.NewRequest(http.MethodPost, n.URL()+"/blobs/"+id+"/upload-grant", strings.NewReader(fmt.Sprintf(`{"byteLength":%d}`, size)))
				req, _ = http.NewRequest(http.MethodPut, presigned(send(req)), bytes.NewReader(data))
				send(req)
				cpu.stop()
				if _, err := n.Blobs.Sweep(ctx); err != nil {
					b.Fatal(err)
				}
				cpu.start()
			}
			cpu.report()
		})
		b.Run("raw-put/"+label, func(b *testing.B) {
			b.SetBytes(int64(size))
			cpu := startCPU(b)
			for i := 0; b.Loop(); i++ {
				name := fmt.Sprintf("raw-%d", i)
				if _, err := raw.Put(ctx, jetstream.ObjectMeta{Name: name, Opts: chunk}, bytes.NewReader(data)); err != nil {
					b.Fatal(err)
				}
				cpu.stop()
				if err := raw.Delete(ctx, name); err != nil {
					b.Fatal(err)
				}
				cpu.start()
			}
			cpu.report()
		})

		// One referenced blob, downloaded again and again.
		binary.LittleEndian.PutUint64(data, uint64(size))
		id := idOf(data)
		req, _ := http.NewRequest(http.MethodPut, n.URL()+"/blobs/"+id, bytes.NewReader(data))
		send(req)
		reference(b, n, sc, id, size)
		if _, err := raw.Put(ctx, jetstream.ObjectMeta{Name: "raw-get", Opts: chunk}, bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
		b.Run("download/"+label, func(b *testing.B) {
			b.SetBytes(int64(size))
			cpu := startCPU(b)
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodGet, n.URL()+"/blobs/"+id, nil)
				send(req)
			}
			cpu.report()
		})
		// The authorized request for a url, then the GET of the url.
		b.Run("presigned-download/"+label, func(b *testing.B) {
			presign(true)
			defer presign(false)
			b.SetBytes(int64(size))
			cpu := startCPU(b)
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodGet, n.URL()+"/blobs/"+id, nil)
				req, _ = http.NewRequest(http.MethodGet, presigned(send(req)), nil)
				send(req)
			}
			cpu.report()
		})
		b.Run("raw-get/"+label, func(b *testing.B) {
			b.SetBytes(int64(size))
			cpu := startCPU(b)
			for b.Loop() {
				r, err := raw.Get(ctx, "raw-get")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, r); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
			cpu.report()
		})
	}
}

// cpuMeter sums the process's CPU time over the spans a benchmark's timer
// runs: start and stop pause it with the timer.
type cpuMeter struct {
	b     *testing.B
	total time.Duration
	at    time.Duration
}

// startCPU starts a meter with the timer running (as b.Loop starts it).
func startCPU(b *testing.B) *cpuMeter { return &cpuMeter{b: b, at: rusage.Self().CPU} }

func (m *cpuMeter) start() {
	m.b.StartTimer()
	m.at = rusage.Self().CPU
}

func (m *cpuMeter) stop() {
	m.total += rusage.Self().CPU - m.at
	m.b.StopTimer()
}

// report adds cpu-ms/op, once b.Loop has ended the last span.
func (m *cpuMeter) report() {
	m.total += rusage.Self().CPU - m.at
	if m.total > 0 && m.b.N > 0 {
		m.b.ReportMetric(float64(m.total.Microseconds())/1000/float64(m.b.N), "cpu-ms/op")
	}
}

// reference writes a files row referencing the blob, so it may be
// downloaded.
func reference(b *testing.B, n *node.Node, sc *schema.Schema, id string, size int) {
	b.Helper()
	t, _ := sc.Table("files")
	vals := []ssp2.Value{{Bytes: []byte("f-" + id[7:15])}, {Bytes: []byte("p1")}, {Bytes: fmt.Appendf(nil, `{"blobId":"%s","byteLength":%d}`, id, size)}}
	payload, err := t.Codec.AppendRow(nil, vals)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := n.Store.PartitionTouch(ctx, "acme", time.Now().UnixMilli()); err != nil {
		b.Fatal(err)
	}
	err = n.Store.WriteTx(ctx, "acme", func(tx storage.Tx) error {
		_, err := tx.RowUpsert(ctx, "files", storage.RowWrite{RowID: string(vals[0].Bytes), Values: vals,
			Scopes: map[string]string{"project_id": "p1"}, Payload: payload})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}
