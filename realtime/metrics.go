package realtime

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/syncnode/syncnode/ssp2"
)

// Metrics are monotonically increasing counters of a Hub's work.
type Metrics struct {
	Opened  atomic.Int64 // sockets accepted
	Closed  atomic.Int64 // sockets ended
	Refused atomic.Int64 // connects refused (auth, client id, limits)
	Deltas  atomic.Int64 // deltas written
	// DeltaEncodes counts deltas encoded: one per commit, wire version
	// and registration set, however many sockets share it.
	DeltaEncodes atomic.Int64
	// Wakes written, by reason.
	WakesCatchup  atomic.Int64
	WakesTooLarge atomic.Int64
	WakesReset    atomic.Int64
	// Dropped counts slow consumers closed: a full send queue for a
	// message that cannot become a wake-up, or a write past WriteTimeout.
	Dropped atomic.Int64
	Rounds  atomic.Int64 // socket rounds run
	Acks    atomic.Int64 // acks received
	// AcksRefused counts acks the store refused: no record of the
	// session's actor under its epoch (a client that never pulled, an ack
	// from before a rotation).
	AcksRefused atomic.Int64
	PresenceIn  atomic.Int64 // presence publishes received from clients
	PresenceOut atomic.Int64 // presence events sent to clients
	BusEvents   atomic.Int64 // commit events read from the bus
	// TailGaps counts resyncs from SQL because commit events may have
	// been missed (the tail dropped events, or the connection came back).
	// It is incremented once the partitions' polls are queued.
	TailGaps atomic.Int64
	// PartitionChecks counts partitions read in SQL to check their
	// sessions (gate changes, polls, resyncs).
	PartitionChecks atomic.Int64
	// CommitReads counts commits read back from SQL for their sessions;
	// CommitsSkipped those no session could match, observed unread.
	CommitReads    atomic.Int64
	CommitsSkipped atomic.Int64
}

// Open is the number of sockets open now.
func (m *Metrics) Open() int64 { return m.Opened.Load() - m.Closed.Load() }

// Wakes is the number of wake-ups written, all reasons.
func (m *Metrics) Wakes() int64 {
	return m.WakesCatchup.Load() + m.WakesTooLarge.Load() + m.WakesReset.Load()
}

func (m *Metrics) wake(r ssp2.WakeReason) {
	switch r {
	case ssp2.WakeCatchupRequired:
		m.WakesCatchup.Add(1)
	case ssp2.WakeDeltaTooLarge:
		m.WakesTooLarge.Add(1)
	case ssp2.WakeResetRequired:
		m.WakesReset.Add(1)
	}
}

// RegisterMetrics registers m's series in reg.
func RegisterMetrics(reg prometheus.Registerer, m *Metrics) error {
	counter := func(name, help string, v func() int64, labels prometheus.Labels) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, func() float64 { return float64(v()) })
	}
	const wakeHelp = "Realtime wake-ups sent, by reason."
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "syncnode_realtime_sockets", Help: "Realtime sockets open."}, func() float64 { return float64(m.Open()) }),
		counter("syncnode_realtime_opened_total", "Realtime sockets accepted.", m.Opened.Load, nil),
		counter("syncnode_realtime_closed_total", "Realtime sockets ended.", m.Closed.Load, nil),
		counter("syncnode_realtime_refused_total", "Realtime connects refused.", m.Refused.Load, nil),
		counter("syncnode_realtime_deltas_total", "Realtime deltas sent.", m.Deltas.Load, nil),
		counter("syncnode_realtime_delta_encodes_total", "Realtime deltas encoded (one per commit, wire version and registration set).", m.DeltaEncodes.Load, nil),
		counter("syncnode_realtime_wakes_total", wakeHelp, m.WakesCatchup.Load, prometheus.Labels{"reason": string(ssp2.WakeCatchupRequired)}),
		counter("syncnode_realtime_wakes_total", wakeHelp, m.WakesTooLarge.Load, prometheus.Labels{"reason": string(ssp2.WakeDeltaTooLarge)}),
		counter("syncnode_realtime_wakes_total", wakeHelp, m.WakesReset.Load, prometheus.Labels{"reason": string(ssp2.WakeResetRequired)}),
		counter("syncnode_realtime_dropped_total", "Realtime slow consumers disconnected.", m.Dropped.Load, nil),
		counter("syncnode_realtime_rounds_total", "Sync rounds run over realtime sockets.", m.Rounds.Load, nil),
		counter("syncnode_realtime_acks_total", "Realtime acks received.", m.Acks.Load, nil),
		counter("syncnode_realtime_acks_refused_total", "Realtime acks that matched no client record of the actor and epoch.", m.AcksRefused.Load, nil),
		counter("syncnode_realtime_presence_received_total", "Presence messages received from clients.", m.PresenceIn.Load, nil),
		counter("syncnode_realtime_presence_sent_total", "Presence events sent to clients.", m.PresenceOut.Load, nil),
		counter("syncnode_realtime_bus_events_total", "Commit events read from the bus.", m.BusEvents.Load, nil),
		counter("syncnode_realtime_partition_checks_total", "Partitions read in SQL to check their realtime sessions (gate changes, polls, resyncs).", m.PartitionChecks.Load, nil),
		counter("syncnode_realtime_tail_gaps_total", "Resyncs from SQL after commit events may have been missed (dropped, or the NATS connection came back).", m.TailGaps.Load, nil),
		counter("syncnode_realtime_commit_reads_total", "Commits read from SQL for realtime sessions.", m.CommitReads.Load, nil),
		counter("syncnode_realtime_commits_skipped_total", "Commits no realtime session could match, not read.", m.CommitsSkipped.Load, nil),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
