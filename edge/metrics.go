package edge

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are monotonically increasing counters of a Hub's work.
type Metrics struct {
	LinkUps   atomic.Int64 // a link answered after being down (or at first)
	LinkDowns atomic.Int64 // a link stopped answering
	Applied   atomic.Int64 // edge commits applied to the replicas
	Sourced   atomic.Int64 // commit events read from the source streams
	// Rebuilds counts replicas dropped and re-paged under an edge's new
	// log epoch.
	Rebuilds atomic.Int64
	// Snapshots counts replicas rebuilt from a snapshot of an edge's rows
	// (the edge pruned commits the replica never applied).
	Snapshots atomic.Int64
	// BlobsFetched counts blobs read from an edge for its replica.
	BlobsFetched atomic.Int64
	// Forwarded counts pushes the edges answered, ForwardRefused those
	// refused (the link cut, or the edge's own refusal).
	Forwarded      atomic.Int64
	ForwardRefused atomic.Int64
	// LeaseTaken counts the edge replication leases this node took.
	LeaseTaken atomic.Int64
	// FollowerWaits counts the waits of a hub node without the lease for
	// the holder's note on a replica position (follower.go);
	// FollowerUnconfirmed those that ended refused, no note in time.
	FollowerWaits       atomic.Int64
	FollowerUnconfirmed atomic.Int64
}

// Collector exports the hub's link state, replica lag and counters:
//
//	syncnode_edge_link_up{edge}               1 while the edge answers
//	syncnode_edge_replica_lag_commits{edge}   edge commits not yet applied
//	syncnode_edge_replica_applied_total       edge commits applied
//	syncnode_edge_sourced_events_total        events read from the source streams
//	syncnode_edge_link_changes_total{state}   up / down transitions
//	syncnode_edge_forwarded_total{result}     pushes forwarded: answered / refused
//	syncnode_edge_replica_rebuilds_total      replicas rebuilt under a new edge epoch
//	syncnode_edge_replica_snapshots_total     replicas rebuilt from a snapshot of the edge's rows
//	syncnode_edge_blobs_fetched_total         blobs read from the edges for the replicas
//	syncnode_edge_replicating{edge}           1 on the hub node holding the edge's replication lease
//	syncnode_edge_lease_taken_total           replication leases this node took
//	syncnode_edge_follower_unconfirmed_total  requests refused at a follower: the holder vouched for no position in time
func (h *Hub) Collector() prometheus.Collector { return hubCollector{h} }

type hubCollector struct{ h *Hub }

var (
	descLinkUp    = prometheus.NewDesc("syncnode_edge_link_up", "1 while the edge answers the hub over the leaf link.", []string{"edge"}, nil)
	descLag       = prometheus.NewDesc("syncnode_edge_replica_lag_commits", "Edge commits the hub's replica has not applied yet.", []string{"edge"}, nil)
	descApplied   = prometheus.NewDesc("syncnode_edge_replica_applied_total", "Edge commits applied to the hub's replicas.", nil, nil)
	descSourced   = prometheus.NewDesc("syncnode_edge_sourced_events_total", "Commit events read from the hub's edge source streams.", nil, nil)
	descChanges   = prometheus.NewDesc("syncnode_edge_link_changes_total", "Edge link state changes, by the state entered.", []string{"state"}, nil)
	descForwarded = prometheus.NewDesc("syncnode_edge_forwarded_total", "Pushes for edge partitions forwarded to their edge, by result.", []string{"result"}, nil)
	descRebuilds  = prometheus.NewDesc("syncnode_edge_replica_rebuilds_total", "Replicas dropped and re-paged under an edge's new log epoch.", nil, nil)
	descSnapshots = prometheus.NewDesc("syncnode_edge_replica_snapshots_total", "Replicas rebuilt from a snapshot of the edge's rows.", nil, nil)
	descBlobs     = prometheus.NewDesc("syncnode_edge_blobs_fetched_total", "Blobs read from the edges for the hub's replicas.", nil, nil)
	descHolder    = prometheus.NewDesc("syncnode_edge_replicating", "1 while this hub node holds the edge's replication lease.", []string{"edge"}, nil)
	descLeases    = prometheus.NewDesc("syncnode_edge_lease_taken_total", "Edge replication leases this hub node took.", nil, nil)
	descUnconf    = prometheus.NewDesc("syncnode_edge_follower_unconfirmed_total", "Requests this hub node refused without the lease: the holder confirmed no replica position in time.", nil, nil)
)

func (c hubCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLinkUp, descLag, descApplied, descSourced, descChanges, descForwarded, descRebuilds, descSnapshots, descBlobs, descHolder, descLeases, descUnconf} {
		ch <- d
	}
}

func (c hubCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.h.Status() {
		up := 0.0
		if s.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descLinkUp, prometheus.GaugeValue, up, s.Edge)
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(s.LagCommits), s.Edge)
		holder := 0.0
		if s.Replicating {
			holder = 1
		}
		ch <- prometheus.MustNewConstMetric(descHolder, prometheus.GaugeValue, holder, s.Edge)
	}
	m := &c.h.metrics
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.CounterValue, float64(m.Applied.Load()))
	ch <- prometheus.MustNewConstMetric(descSourced, prometheus.CounterValue, float64(m.Sourced.Load()))
	ch <- prometheus.MustNewConstMetric(descRebuilds, prometheus.CounterValue, float64(m.Rebuilds.Load()))
	ch <- prometheus.MustNewConstMetric(descSnapshots, prometheus.CounterValue, float64(m.Snapshots.Load()))
	ch <- prometheus.MustNewConstMetric(descBlobs, prometheus.CounterValue, float64(m.BlobsFetched.Load()))
	ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(m.LinkUps.Load()), "up")
	ch <- prometheus.MustNewConstMetric(descChanges, prometheus.CounterValue, float64(m.LinkDowns.Load()), "down")
	ch <- prometheus.MustNewConstMetric(descForwarded, prometheus.CounterValue, float64(m.Forwarded.Load()), "answered")
	ch <- prometheus.MustNewConstMetric(descForwarded, prometheus.CounterValue, float64(m.ForwardRefused.Load()), "refused")
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.CounterValue, float64(m.LeaseTaken.Load()))
	ch <- prometheus.MustNewConstMetric(descUnconf, prometheus.CounterValue, float64(m.FollowerUnconfirmed.Load()))
}
