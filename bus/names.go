package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Names is a namespace of bus names: every stream, bucket and subject a
// node uses is built by a Names method. The zero Names is the production
// namespace, with the names of the package doc (SYNC_COMMITS, sync.>,
// syncctl.>, sync_gate, sync_leases, sync_segments). NewNames(prefix)
// gives an isolated namespace on the same NATS server, which is how the
// test-control instances share one embedded server:
//
//	streams   <prefix>_SYNC_COMMITS, <prefix>_SYNC_CONTROL
//	subjects  <prefix>.sync.<partition>.commit.<table>, <prefix>.syncctl.<partition>.<event>
//	buckets   <prefix>_sync_gate, <prefix>_sync_leases, <prefix>_sync_segments
//
// Keys inside the buckets are the same in every namespace. Build a Names
// once and pass it by value; it is comparable.
type Names struct {
	prefix string
}

// MaxNamespaceLen bounds a namespace prefix.
const MaxNamespaceLen = 32

// ErrInvalidNamespace is returned by NewNames for a prefix that is not
// [A-Za-z0-9_-]{1,MaxNamespaceLen}, or that is the first token of a
// production subject root (sync, syncctl, syncreact, syncrt, syncnode):
// its subjects would fall under the production wildcards.
var ErrInvalidNamespace = errors.New("invalid bus namespace")

// reservedRoots are the first tokens of the production subject roots.
var reservedRoots = []string{"sync", "syncctl", "syncreact", "syncrt", "syncnode"}

// NewNames returns the namespace of prefix; "" is the production
// namespace.
func NewNames(prefix string) (Names, error) {
	if prefix == "" {
		return Names{}, nil
	}
	if len(prefix) > MaxNamespaceLen || slices.Contains(reservedRoots, prefix) {
		return Names{}, fmt.Errorf("%w: %q", ErrInvalidNamespace, prefix)
	}
	for i := 0; i < len(prefix); i++ {
		if !keep(prefix[i]) {
			return Names{}, fmt.Errorf("%w: %q", ErrInvalidNamespace, prefix)
		}
	}
	return Names{prefix: prefix}, nil
}

// Prefix is the namespace prefix, "" for production.
func (n Names) Prefix() string { return n.prefix }

// String names the namespace for logs.
func (n Names) String() string {
	if n.prefix == "" {
		return "(production)"
	}
	return n.prefix
}

// name prefixes a stream or bucket name: <prefix>_<base>.
func (n Names) name(base string) string {
	if n.prefix == "" {
		return base
	}
	return n.prefix + "_" + base
}

// subject prefixes a subject: <prefix>.<base>.
func (n Names) subject(base string) string {
	if n.prefix == "" {
		return base
	}
	return n.prefix + "." + base
}

// unprefix strips the namespace prefix from a subject of this namespace;
// ok is false for a subject of another.
func (n Names) unprefix(subject string) (string, bool) {
	if n.prefix == "" {
		return subject, true
	}
	return strings.CutPrefix(subject, n.prefix+".")
}

// Stream and bucket names.
const (
	streamCommits  = "SYNC_COMMITS"
	streamControl  = "SYNC_CONTROL"
	bucketGate     = "sync_gate"
	bucketLeases   = "sync_leases"
	bucketSegments = "sync_segments"
)

// CommitStream holds every commit event: SYNC_COMMITS.
func (n Names) CommitStream() string { return n.name(streamCommits) }

// ControlStream holds control events (serve gate, migrations):
// SYNC_CONTROL.
func (n Names) ControlStream() string { return n.name(streamControl) }

// GateBucket is the KV bucket of serve-gate tokens (gate.<partition>,
// schema.current): sync_gate.
func (n Names) GateBucket() string { return n.name(bucketGate) }

// LeaseBucket is the KV bucket of short-lived leases (History 1, per-key
// TTL): sync_leases.
func (n Names) LeaseBucket() string { return n.name(bucketLeases) }

// SegmentsBucket is the Object Store bucket of bootstrap segments:
// sync_segments.
func (n Names) SegmentsBucket() string { return n.name(bucketSegments) }

// Subject pieces. Concrete subjects come from the builders below; the
// expanded form is in each comment.
const (
	commitPrefix  = "sync."
	commitInfix   = ".commit."
	controlPrefix = "syncctl."
)

// CommitSubjects is the subject space of the commit stream:
// sync.*.commit.*.
func (n Names) CommitSubjects() string { return n.subject(commitPrefix + "*" + commitInfix + "*") }

// AllCommits matches every commit event, what `nats sub 'sync.>'` shows:
// sync.>.
func (n Names) AllCommits() string { return n.subject(commitPrefix + ">") }

// ControlSubjects is the subject space of the control stream: syncctl.>.
func (n Names) ControlSubjects() string { return n.subject(controlPrefix + ">") }

// GlobalControl matches every node-wide control event: syncctl.=global.>.
func (n Names) GlobalControl() string { return n.subject(controlPrefix + GlobalToken + ".>") }

// ErrProductionNamespace is returned by DeleteNamespace for the
// production namespace.
var ErrProductionNamespace = errors.New("the production namespace is never deleted")

// DeleteNamespace deletes the streams and buckets of an isolated
// namespace (what a test-control instance leaves behind); absent ones are
// skipped. It refuses the production namespace.
func DeleteNamespace(ctx context.Context, js jetstream.JetStream, n Names) error {
	if n.prefix == "" {
		return ErrProductionNamespace
	}
	var errs []error
	for _, s := range []string{n.CommitStream(), n.ControlStream()} {
		if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			errs = append(errs, fmt.Errorf("delete stream %s: %w", s, err))
		}
	}
	for _, b := range []string{n.GateBucket(), n.LeaseBucket()} {
		if err := js.DeleteKeyValue(ctx, b); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			errs = append(errs, fmt.Errorf("delete bucket %s: %w", b, err))
		}
	}
	for _, b := range []string{n.SegmentsBucket(), n.BlobsBucket()} {
		if err := js.DeleteObjectStore(ctx, b); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			errs = append(errs, fmt.Errorf("delete bucket %s: %w", b, err))
		}
	}
	return errors.Join(errs...)
}
