package httpapi

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncnode/syncnode/engine"
)

// metrics are the node's Prometheus series.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec

	// The series observe has resolved: a vector resolves its labels by
	// hashing them under a lock on every call, which cost ~1% of a
	// push + pull round. Routes and status codes are few, so these stay
	// small.
	mu     sync.RWMutex
	counts map[routeStatus]prometheus.Counter
	lats   map[string]prometheus.Observer
}

type routeStatus struct {
	route  string
	status int
}

func newMetrics(reg *prometheus.Registry, em *engine.Metrics, budget *bodyBudget) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncnode_http_requests_total", Help: "HTTP requests by route and status.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "syncnode_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10},
		}, []string{"route"}),
	}
	counters := []struct {
		name, help string
		v          func() int64
	}{
		{"syncnode_sync_requests_total", "SSP2 requests handled.", em.Requests.Load},
		{"syncnode_sync_request_errors_total", "SSP2 requests that failed.", em.RequestErrors.Load},
		{"syncnode_sync_clients_gone_total", "SSP2 requests whose client went away before the response ended.", em.ClientsGone.Load},
		{"syncnode_push_applied_total", "Push commits applied.", em.PushApplied.Load},
		{"syncnode_push_cached_total", "Push commits answered from the idempotency record.", em.PushCached.Load},
		{"syncnode_push_rejected_total", "Push commits rejected.", em.PushRejected.Load},
		{"syncnode_push_conflicts_total", "Push operations that conflicted.", em.PushConflicted.Load},
		{"syncnode_commits_total", "Commits appended to the log.", em.Commits.Load},
		{"syncnode_pull_sections_total", "Subscription sections answered.", em.PullSections.Load},
		{"syncnode_request_starts_cached_total", "Requests whose partition row and client record came from the store's cache.", em.StartsCached.Load},
		{"syncnode_bootstraps_total", "Bootstrap sections answered.", em.Bootstraps.Load},
		{"syncnode_segments_built_total", "Bootstrap segments built.", em.SegmentsBuilt.Load},
		{"syncnode_segments_reused_total", "Bootstrap segments reused from an earlier build.", em.SegmentsReused.Load},
		{"syncnode_segments_inline_total", "Segments delivered inline.", em.SegmentsInline.Load},
		{"syncnode_segment_fallbacks_total", "Bootstrap pages built in memory and sent inline because the segment store failed.", em.SegmentFallbacks.Load},
		{"syncnode_segment_refs_total", "Segments delivered by reference.", em.SegmentRefs.Load},
		{"syncnode_rows_bootstrapped_total", "Rows delivered in bootstrap segments.", em.RowsBootstrapped.Load},
		{"syncnode_images_built_total", "SQLite-image segments built.", em.ImagesBuilt.Load},
		{"syncnode_images_reused_total", "SQLite-image segments served from an earlier build.", em.ImagesReused.Load},
		{"syncnode_image_refs_total", "SQLite-image descriptors sent.", em.ImageRefs.Load},
		{"syncnode_signed_urls_total", "Signed segment URLs minted.", em.SignedURLs.Load},
		{"syncnode_signed_url_refusals_total", "Downloads by signed URL refused.", em.SignedRefusals.Load},
		{"syncnode_signed_blob_urls_total", "Presigned blob downloads and upload grants minted.", em.SignedBlobURLs.Load},
		{"syncnode_signed_blob_refusals_total", "Blob requests by presigned URL refused.", em.SignedBlobRefusals.Load},
	}
	cs := []prometheus.Collector{m.requests, m.latency, prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "syncnode_image_build_seconds_total", Help: "Time spent building SQLite-image segments.",
	}, func() float64 { return float64(em.ImageBuildNanos.Load()) / 1e9 }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "syncnode_http_inflight_body_bytes", Help: "Request body bytes held by in-flight requests (the in-flight budget in use).",
	}, func() float64 { return float64(budget.held.Load()) })}
	for _, c := range counters {
		v := c.v
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help}, func() float64 { return float64(v()) }))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(route string, status int, d time.Duration) {
	k := routeStatus{route, status}
	m.mu.RLock()
	c, okc := m.counts[k]
	o, oko := m.lats[route]
	m.mu.RUnlock()
	if !okc || !oko {
		c = m.requests.WithLabelValues(route, strconv.Itoa(status))
		o = m.latency.WithLabelValues(route)
		m.mu.Lock()
		if m.counts == nil {
			m.counts, m.lats = map[routeStatus]prometheus.Counter{}, map[string]prometheus.Observer{}
		}
		m.counts[k], m.lats[route] = c, o
		m.mu.Unlock()
	}
	c.Inc()
	o.Observe(d.Seconds())
}
