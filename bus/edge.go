package bus

import (
	"errors"
	"fmt"
	"strings"
)

// Names of the edge/hub topology (package edge). An edge is a node whose
// embedded server is a leaf of the hub's, with a JetStream domain named
// like the edge; the hub keeps a read replica of the edge's partitions.
//
//	edge service     syncnode.edge.<edge>.status    (the edge answers; its hub asks over the leaf link)
//	                 syncnode.edge.<edge>.commits
//	                 syncnode.edge.<edge>.push
//	                 syncnode.edge.<edge>.rows
//	                 syncnode.edge.<edge>.blob
//	                 syncnode.edge.<edge>.command
//	source stream    EDGE_<edge>_COMMITS            (on the hub; no subjects: it sources the
//	                                                 edge's SYNC_COMMITS from domain <edge>)
//	stored subjects  edge.<edge>.sync.<partition>.commit.<table>
//	source consumer  HUB_SOURCE                     (durable, on the edge's SYNC_COMMITS)
//	delivered on     syncedge.<edge>.source
//	replica notes    syncrt.=edge.<edge>.replica    (hub nodes among themselves: the lease
//	                                                 holder's word on each replica it moved)
//
// The service subjects belong to the deployment, like the admin API's;
// the stream, consumer and stored subjects follow the namespace.
const (
	edgeServicePrefix = "syncnode.edge."
	edgeDeliverPrefix = "syncedge."
	edgeStoredPrefix  = "edge."
	// EdgeSourceConsumer is the durable consumer on an edge's commit
	// stream that its hub's source stream reads.
	EdgeSourceConsumer = "HUB_SOURCE"
)

// MaxEdgeNameLen bounds an edge name: it is a JetStream domain, a subject
// token and part of a stream name.
const MaxEdgeNameLen = 32

// ErrInvalidEdge is returned by CheckEdge.
var ErrInvalidEdge = errors.New("invalid edge name")

// CheckEdge validates an edge name: [A-Za-z0-9_-]{1,MaxEdgeNameLen}, and
// not "hub" (the name a partition's home takes when it is the hub).
func CheckEdge(edge string) error {
	if edge == "" || len(edge) > MaxEdgeNameLen || edge == "hub" {
		return fmt.Errorf("%w: %q", ErrInvalidEdge, edge)
	}
	for i := 0; i < len(edge); i++ {
		if !keep(edge[i]) {
			return fmt.Errorf("%w: %q must match [A-Za-z0-9_-]+", ErrInvalidEdge, edge)
		}
	}
	return nil
}

// EdgeStatusSubject is syncnode.edge.<edge>.status: the edge's home
// partitions with their epochs and max commit seqs.
func EdgeStatusSubject(edge string) string { return edgeServicePrefix + edge + ".status" }

// EdgeCommitsSubject is syncnode.edge.<edge>.commits: a page of one
// partition's commit log.
func EdgeCommitsSubject(edge string) string { return edgeServicePrefix + edge + ".commits" }

// EdgePushSubject is syncnode.edge.<edge>.push: a sync request the hub
// forwards for the edge to apply.
func EdgePushSubject(edge string) string { return edgeServicePrefix + edge + ".push" }

// EdgeRowsSubject is syncnode.edge.<edge>.rows: a page of one table's
// rows of a partition, the snapshot a replica is rebuilt from when the
// edge pruned commits the replica never applied.
func EdgeRowsSubject(edge string) string { return edgeServicePrefix + edge + ".rows" }

// EdgeBlobSubject is syncnode.edge.<edge>.blob: the edge's row of a
// blob a partition holds (its object in the edge's sync_blobs), which
// the hub reads across the domain before a replicated row references it.
func EdgeBlobSubject(edge string) string { return edgeServicePrefix + edge + ".blob" }

// EdgeCommandSubject is syncnode.edge.<edge>.command: a remote command
// (package operations) the hub forwards for the edge to run.
func EdgeCommandSubject(edge string) string { return edgeServicePrefix + edge + ".command" }

// EdgeStream is the hub's stream sourcing an edge's commit events:
// EDGE_<edge>_COMMITS.
func (n Names) EdgeStream(edge string) string { return n.name("EDGE_" + edge + "_COMMITS") }

// EdgeDeliverSubject is where the edge's source consumer delivers:
// syncedge.<edge>.source.
func (n Names) EdgeDeliverSubject(edge string) string {
	return n.subject(edgeDeliverPrefix + edge + ".source")
}

// EdgeReplicaSubject is where the hub node replicating an edge tells the
// other hub nodes what it made of each replica (a position and whether it
// may be served there), and answers their asks: syncrt.=edge.<edge>.replica.
// It is hub-local, under the realtime prefix every leaf remote keeps off
// the link (LeafIsolated), so an edge can neither see nor forge it; "=edge"
// is never a partition token.
func (n Names) EdgeReplicaSubject(edge string) string {
	return n.subject(realtimePrefix + "=edge." + edge + ".replica")
}

// EdgeStoredPrefix is what the source transform puts before an edge's
// commit subjects in the hub's stream: edge.<edge>.
func EdgeStoredPrefix(edge string) string { return edgeStoredPrefix + edge + "." }

// ParseEdgeSubject strips the edge prefix from a stored subject of
// EdgeStream(edge), giving the edge's commit subject.
func ParseEdgeSubject(edge, subject string) (string, bool) {
	return strings.CutPrefix(subject, EdgeStoredPrefix(edge))
}

// LeafIsolated are the subjects an edge's leaf remote must keep off the
// link in both directions (deny_exports and deny_imports): the node's
// own streams and buckets exist on both sides of the link, and a stream
// of one side bound to a subject would store the other side's messages
// too (NATS-NOTES pitfall 3), KV and Object Store puts included.
// Realtime presence, reactions, remote operations and the admin API are
// node-local too.
// The edge service and the JetStream API ($JS.<domain>.API.>) must
// cross.
func (n Names) LeafIsolated() []string {
	return []string{
		n.AllCommits(),
		n.ControlSubjects(),
		n.subject("syncrt.>"),
		n.subject("syncreact.>"),
		n.subject("syncops.>"),
		SubjectAdmin,
		"$KV.>",
		"$O.>",
	}
}
