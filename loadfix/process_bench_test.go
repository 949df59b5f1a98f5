package loadfix_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncnode/syncnode/ssp2"
)

// These benchmarks drive a real `syncnode serve --load-fixture` in its own
// process over loopback HTTP, as Syncular's load suite drives a server: the
// server's RSS is its own, and the load generator stays light (it reads
// segment bodies and decodes responses, but keeps no replica).

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// TestMain removes the binary the benchmarks built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// syncnodeBinary builds cmd/syncnode once per test binary.
func syncnodeBinary(b *testing.B) string {
	b.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "syncnode-bench-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "syncnode")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/syncnode/syncnode/cmd/syncnode").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if binErr != nil {
		b.Fatal(binErr)
	}
	return binPath
}

// loadServer is a running node process in load-fixture mode.
type loadServer struct {
	url string
	hc  *http.Client
}

func startLoadServer(b *testing.B, extra ...string) *loadServer {
	b.Helper()
	args := append([]string{"serve", "--load-fixture", "--http", "127.0.0.1:0", "--data", b.TempDir(), "--nats-port", "-1"}, extra...)
	cmd := exec.Command(syncnodeBinary(b), args...)
	cmd.Env = append(os.Environ(), "SYNCNODE_LOG_LEVEL=warn")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "syncnode: listening on "); ok {
				lines <- u
			}
		}
		close(lines)
	}()
	select {
	case u, ok := <-lines:
		if !ok {
			b.Fatalf("server exited before listening: %s", stderr.String())
		}
		tr := &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}
		return &loadServer{url: u, hc: &http.Client{Transport: tr}}
	case <-time.After(60 * time.Second):
		b.Fatalf("server did not start: %s", stderr.String())
	}
	return nil
}

func (s *loadServer) postJSON(b *testing.B, path string, in, out any) {
	b.Helper()
	body, _ := json.Marshal(in)
	resp, err := s.hc.Post(s.url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: %d %s", path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			b.Fatalf("%s: %v", path, err)
		}
	}
}

type serverMetrics struct {
	RSSBytes       int64 `json:"rssBytes"`
	PeakRSSBytes   int64 `json:"peakRssBytes"`
	SegmentsBuilt  int64 `json:"segmentsBuilt"`
	SegmentsReused int64 `json:"segmentsReused"`
	PushApplied    int64 `json:"pushApplied"`
	RequestErrors  int64 `json:"requestErrors"`
}

func (s *loadServer) metrics(b *testing.B) serverMetrics {
	b.Helper()
	resp, err := s.hc.Get(s.url + "/__load/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var m serverMetrics
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		b.Fatal(err)
	}
	return m
}

// sync sends one SSP2 request and decodes the response.
func (s *loadServer) sync(frames ...ssp2.Frame) (*ssp2.Message, error) {
	body, err := (&ssp2.Message{WireVersion: 2, Kind: ssp2.KindRequest, Frames: frames}).AppendEncode(nil)
	if err != nil {
		return nil, err
	}
	req, _ := http.NewRequest(http.MethodPost, s.url+"/sync", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/vnd.syncular.sync.v2")
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("sync: %d %s", resp.StatusCode, raw)
	}
	return ssp2.DecodeMessage(raw)
}

func (s *loadServer) epoch(b *testing.B) string {
	b.Helper()
	m, err := s.sync(&ssp2.ReqHeader{ClientID: "bench-epoch", SchemaVersion: 1}, &ssp2.PullHeader{Accept: 3})
	if err != nil {
		b.Fatal(err)
	}
	return m.Frames[0].(*ssp2.RespHeader).LogEpoch
}

// percentile returns the p-th percentile of sorted durations.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// BenchmarkStorm50x20k is the reference load suite's bootstrap storm: 50
// clients repeatedly bootstrap the same 20,000-row table (one page of
// 20,000 rows, referenced and downloaded), so every bootstrap after the
// first reuses one segment. b.N is the number of bootstraps.
func BenchmarkStorm50x20k(b *testing.B) {
	s := startLoadServer(b)
	s.postJSON(b, "/__load/reset", map[string]int{"seedRows": 20_000}, nil)
	ep := s.epoch(b)
	const clients = 50
	var next atomic.Int64
	var rows atomic.Int64
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	b.ResetTimer()
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("storm-%d", c)
			for next.Add(1) <= int64(b.N) {
				t0 := time.Now()
				n, err := s.bootstrap(id, ep)
				if err != nil {
					errs <- err
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
				rows.Add(n)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	m := s.metrics(b)
	if rows.Load() != int64(b.N)*20_000 {
		b.Fatalf("delivered %d rows for %d bootstraps", rows.Load(), b.N)
	}
	b.ReportMetric(float64(rows.Load())/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "bootstraps/s")
	b.ReportMetric(float64(percentile(all, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(all, 0.95).Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(m.SegmentsBuilt), "builds")
	b.ReportMetric(float64(m.SegmentsReused), "reuses")
	b.ReportMetric(float64(m.PeakRSSBytes)/(1<<20), "peak-rss-MB")
}

// bootstrap runs one fresh bootstrap of the storm project and downloads
// its segments; it returns the rows delivered.
func (s *loadServer) bootstrap(clientID, ep string) (int64, error) {
	e := ep
	m, err := s.sync(&ssp2.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &e},
		&ssp2.PullHeader{LimitSnapshotRows: 20_000, MaxSnapshotPages: 1, Accept: 3},
		&ssp2.Subscription{ID: "tasks", Table: "tasks", Scopes: map[string][]string{"project_id": {"storm"}}, Cursor: -1})
	if err != nil {
		return 0, err
	}
	scopes := string(ssp2.CanonicalScopes(map[string][]string{"project_id": {"storm"}}))
	var rows int64
	for _, f := range m.Frames {
		switch f := f.(type) {
		case *ssp2.SegmentRef:
			req, _ := http.NewRequest(http.MethodGet, s.url+"/segments/"+f.SegmentID, nil)
			req.Header.Set("X-Syncular-Scopes", scopes)
			resp, err := s.hc.Do(req)
			if err != nil {
				return 0, err
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || n != f.ByteLength {
				return 0, fmt.Errorf("download %s: %d, %d of %d bytes, %v", f.SegmentID, resp.StatusCode, n, f.ByteLength, err)
			}
			rows += f.RowCount
		case *ssp2.SegmentInline:
			r, err := ssp2.NewSegmentReader(bytes.NewReader(f.Payload))
			if err != nil {
				return 0, err
			}
			for r.NextBlock() {
				rows += int64(r.BlockRows())
			}
			if err := r.Err(); err != nil {
				return 0, err
			}
		case *ssp2.ErrorFrame:
			return 0, fmt.Errorf("in-band error %s: %s", f.Code, f.Message)
		}
	}
	return rows, nil
}

// BenchmarkPushPull20Clients is the reference load suite's push-pull
// scenario: 20 clients, each round one small upsert plus an incremental
// pull of the project, all in one request. b.N is the number of rounds.
func BenchmarkPushPull20Clients(b *testing.B) {
	s := startLoadServer(b)
	s.postJSON(b, "/__load/reset", map[string]int{"seedRows": 0}, nil)
	ep := s.epoch(b)
	const clients = 20
	var next atomic.Int64
	lat := make([][]time.Duration, clients)
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("pp-%d", c)
			cursor := int64(0)
			for i := 0; next.Add(1) <= int64(b.N); i++ {
				t0 := time.Now()
				e := ep
				row := taskRow(fmt.Sprintf("%s-%d", id, i%50), i)
				m, err := s.sync(&ssp2.ReqHeader{ClientID: id, SchemaVersion: 1, LogEpoch: &e},
					&ssp2.PushCommit{ClientCommitID: fmt.Sprintf("%s-c%d", id, i), Operations: []ssp2.Operation{{Table: "tasks", RowID: fmt.Sprintf("%s-%d", id, i%50), Op: ssp2.OpUpsert, Payload: row}}},
					&ssp2.PullHeader{Accept: 3},
					&ssp2.Subscription{ID: "tasks", Table: "tasks", Scopes: map[string][]string{"project_id": {"pp"}}, Cursor: cursor})
				if err != nil {
					errs <- err
					return
				}
				for _, f := range m.Frames {
					switch f := f.(type) {
					case *ssp2.PushResult:
						if f.Status != ssp2.PushApplied {
							errs <- fmt.Errorf("push %s: %v", f.ClientCommitID, f.Status)
							return
						}
					case *ssp2.SubEnd:
						cursor = f.NextCursor
					case *ssp2.ErrorFrame:
						errs <- fmt.Errorf("in-band error %s", f.Code)
						return
					}
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	m := s.metrics(b)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rounds/s")
	b.ReportMetric(float64(percentile(all, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(all, 0.95).Microseconds())/1000, "p95-ms")
	b.ReportMetric(float64(m.PeakRSSBytes)/(1<<20), "peak-rss-MB")
}

// taskRow encodes a fixture tasks row in project "pp".
func taskRow(id string, i int) []byte {
	cols := []ssp2.Column{
		{Name: "id", Type: ssp2.TypeString}, {Name: "project_id", Type: ssp2.TypeString},
		{Name: "title", Type: ssp2.TypeString}, {Name: "done", Type: ssp2.TypeBoolean},
		{Name: "priority", Type: ssp2.TypeInteger}, {Name: "updated_at_ms", Type: ssp2.TypeInteger},
	}
	codec, err := ssp2.NewRowCodec(cols)
	if err != nil {
		panic(err)
	}
	b, err := codec.AppendRow(nil, []ssp2.Value{
		{Bytes: []byte(id)}, {Bytes: []byte("pp")}, {Bytes: []byte("push pull round")},
		{Bool: i%2 == 0}, {Int: int64(i % 5)}, {Int: 1_700_000_000_000 + int64(i)},
	})
	if err != nil {
		panic(err)
	}
	return b
}
