package reactions

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncnode/syncnode/storage"
)

// metrics are a Runner's Prometheus series:
//
//	syncnode_reactions{status}                       rows by status (every partition, read from the store at scrape, cached 5 s)
//	syncnode_reaction_claim_latency_seconds          from due to claimed
//	syncnode_reaction_attempts{outcome}              attempts a reaction took to complete or dead-letter
//	syncnode_reaction_outcomes_total{outcome}        completed, failed, dead_lettered, lost
//	syncnode_reaction_skipped_wakes_total            commit events that cost no claim (ce-reactions "0"; Stats.SkippedWakes)
type metrics struct {
	r        *Runner
	latency  prometheus.Histogram
	attempts *prometheus.HistogramVec
	outcomes *prometheus.CounterVec
	status   *prometheus.Desc
	skipped  *prometheus.Desc

	mu      sync.Mutex
	counts  storage.ReactionCounts
	countAt time.Time
}

func newMetrics(r *Runner) *metrics {
	return &metrics{
		r: r,
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "syncnode_reaction_claim_latency_seconds", Help: "Time from a reaction falling due to its claim.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 30, 60, 300},
		}),
		attempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "syncnode_reaction_attempts", Help: "Attempts a reaction took, by terminal outcome.",
			Buckets: []float64{1, 2, 3, 5, 10, 20, 50, 100},
		}, []string{"outcome"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "syncnode_reaction_outcomes_total", Help: "Reaction attempts by outcome (completed, failed, dead_lettered, lost).",
		}, []string{"outcome"}),
		status:  prometheus.NewDesc("syncnode_reactions", "Reactions stored, by status.", []string{"status"}, nil),
		skipped: prometheus.NewDesc("syncnode_reaction_skipped_wakes_total", "Commit events that cost the runner no claim because their commits enqueued no reactions.", nil, nil),
	}
}

func (m *metrics) claimed(now time.Time, r storage.Reaction) {
	m.latency.Observe(max(now.Sub(time.UnixMilli(r.AvailableAtMs)), 0).Seconds())
}

func (m *metrics) outcome(o string) { m.outcomes.WithLabelValues(o).Inc() }

func (m *metrics) terminal(o string, attempts int32) {
	m.outcome(o)
	m.attempts.WithLabelValues(o).Observe(float64(attempts))
}

// Collector returns the runner's Prometheus collector.
func (r *Runner) Collector() prometheus.Collector { return r.metrics }

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.latency.Describe(ch)
	m.attempts.Describe(ch)
	m.outcomes.Describe(ch)
	ch <- m.status
	ch <- m.skipped
}

// Collect implements prometheus.Collector. The status counts come from
// one grouped count over the table, at most every 5 s.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.latency.Collect(ch)
	m.attempts.Collect(ch)
	m.outcomes.Collect(ch)
	ch <- prometheus.MustNewConstMetric(m.skipped, prometheus.CounterValue, float64(m.r.stats.SkippedWakes.Load()))
	m.mu.Lock()
	defer m.mu.Unlock()
	if time.Since(m.countAt) > 5*time.Second {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		counts, err := m.r.cfg.Store.ReactionCounts(ctx)
		cancel()
		if err != nil {
			m.r.log.Warn("reactions: counting for metrics failed", "err", err)
			return
		}
		m.counts, m.countAt = counts, time.Now()
	}
	for st, n := range map[storage.ReactionStatus]int64{
		storage.ReactionPending: m.counts.Pending, storage.ReactionLeased: m.counts.Leased,
		storage.ReactionCompleted: m.counts.Completed, storage.ReactionDeadLetter: m.counts.DeadLetter,
	} {
		ch <- prometheus.MustNewConstMetric(m.status, prometheus.GaugeValue, float64(n), string(st))
	}
}
