package hooks

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the hooks' Prometheus series, labelled by hook (scopes,
// validate, token):
//
//	syncnode_hook_requests_total{hook}              requests sent to the hook subject
//	syncnode_hook_errors_total{hook,reason}         failed requests: timeout, no_responders, error_reply, invalid_reply, transport
//	syncnode_hook_request_duration_seconds{hook}    request latency (answered or not)
//	syncnode_hook_cache_hits_total{hook}            answers served from the cache
//	syncnode_hook_rejections_total{hook}            validate: commits the hook rejected
//
// A nil *Metrics records nothing.
type Metrics struct {
	requests   *prometheus.CounterVec
	errors     *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	cacheHits  *prometheus.CounterVec
	rejections *prometheus.CounterVec
}

// Error reasons (the reason label).
const (
	ReasonTimeout      = "timeout"
	ReasonNoResponders = "no_responders"
	ReasonErrorReply   = "error_reply"
	ReasonInvalidReply = "invalid_reply"
	ReasonTransport    = "transport"
)

// NewMetrics registers the series with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncnode_hook_requests_total", Help: "Requests sent to a host hook.",
		}, []string{"hook"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncnode_hook_errors_total", Help: "Host hook requests that failed, by reason.",
		}, []string{"hook", "reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "syncnode_hook_request_duration_seconds", Help: "Host hook request latency.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"hook"}),
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncnode_hook_cache_hits_total", Help: "Host hook answers served from the node's cache.",
		}, []string{"hook"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncnode_hook_rejections_total", Help: "Commits a validate hook rejected.",
		}, []string{"hook"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.errors, m.latency, m.cacheHits, m.rejections} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(hook string, d time.Duration, reason string) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(hook).Inc()
	m.latency.WithLabelValues(hook).Observe(d.Seconds())
	if reason != "" {
		m.errors.WithLabelValues(hook, reason).Inc()
	}
}

func (m *Metrics) cacheHit(hook string) {
	if m != nil {
		m.cacheHits.WithLabelValues(hook).Inc()
	}
}

func (m *Metrics) rejected(hook string) {
	if m != nil {
		m.rejections.WithLabelValues(hook).Inc()
	}
}
