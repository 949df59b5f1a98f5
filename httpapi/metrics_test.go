package httpapi

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncnode/syncnode/engine"
)

// observe resolves each route's series once and keeps them: counts and
// latencies land on the right (route, code) series however many requests
// observe them, concurrently.
func TestObserveCountsByRouteAndStatus(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, &engine.Metrics{}, newBodyBudget(1))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				m.observe("sync", 200, time.Millisecond)
				m.observe("sync", 503, time.Millisecond)
				m.observe("segment", 200, time.Millisecond)
			}
		})
	}
	wg.Wait()
	counts := map[string]float64{}
	latencies := map[string]uint64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			labels := ""
			for _, l := range mt.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + " "
			}
			switch mf.GetName() {
			case "syncnode_http_requests_total":
				counts[labels] = mt.GetCounter().GetValue()
			case "syncnode_http_request_duration_seconds":
				latencies[labels] = mt.GetHistogram().GetSampleCount()
			}
		}
	}
	want := map[string]float64{"code=200 route=sync ": 200, "code=503 route=sync ": 200, "code=200 route=segment ": 200}
	if len(counts) != len(want) {
		t.Errorf("request series %v, want %v", counts, want)
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("requests{%s} = %v, want %v", k, counts[k], v)
		}
	}
	if len(latencies) != 2 || latencies["route=sync "] != 400 || latencies["route=segment "] != 200 {
		t.Errorf("latency sample counts %v, want sync 400, segment 200", latencies)
	}
}
