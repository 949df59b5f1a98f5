package bus

import (
	"errors"
	"fmt"
)

// Streams.
const (
	// StreamCommits holds every commit event.
	StreamCommits = "SYNC_COMMITS"
	// StreamControl holds control events (serve gate, migrations).
	StreamControl = "SYNC_CONTROL"
)

// Subjects and wildcards. Concrete subjects come from the builders below;
// the expanded form is in each comment.
const (
	// SubjectCommits is the subject space of SYNC_COMMITS:
	// sync.<partition>.commit.<table>.
	SubjectCommits = "sync.*.commit.*"
	// SubjectAll matches every commit event, what `nats sub 'sync.>'`
	// shows.
	SubjectAll = "sync.>"
	// SubjectControl is the subject space of SYNC_CONTROL:
	// syncctl.<partition>.<event>.
	SubjectControl = "syncctl.>"

	commitPrefix  = "sync."
	commitInfix   = ".commit."
	controlPrefix = "syncctl."
)

// KV buckets and keys. The gate and segments issues own their contents.
const (
	// BucketGate holds serve-gate tokens: gate.<partition>.
	BucketGate = "sync_gate"
	// BucketLeases holds short-lived leases (History 1, per-key TTL).
	BucketLeases = "sync_leases"
	// BucketSegments is the Object Store bucket of bootstrap segments.
	BucketSegments = "sync_segments"
)

// MaxTableNameLen bounds table names (PostgreSQL's identifier limit, as in
// package schema).
const MaxTableNameLen = 63

// ErrInvalidTable is returned for a table name that is not an identifier
// [A-Za-z_][A-Za-z0-9_]* of at most MaxTableNameLen bytes.
var ErrInvalidTable = errors.New("invalid table name")

// ErrInvalidEvent is returned for a control event name that is not
// [a-z0-9_-]+ (at most 64 bytes).
var ErrInvalidEvent = errors.New("invalid control event name")

// CheckTable validates a table name for use in a subject.
func CheckTable(table string) error {
	if table == "" || len(table) > MaxTableNameLen {
		return fmt.Errorf("%w: %q", ErrInvalidTable, table)
	}
	for i := 0; i < len(table); i++ {
		c := table[i]
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return fmt.Errorf("%w: %q", ErrInvalidTable, table)
		}
	}
	return nil
}

// CommitSubject is sync.<partition>.commit.<table>.
func CommitSubject(p Partition, table string) (string, error) {
	if err := CheckTable(table); err != nil {
		return "", err
	}
	return commitSubject(p.token, table), nil
}

func commitSubject(token, table string) string {
	return commitPrefix + token + commitInfix + table
}

// PartitionCommits is sync.<partition>.commit.>: every table of one
// partition. It is the relay's compare-and-set subject.
func PartitionCommits(p Partition) string {
	return commitPrefix + p.token + commitInfix + ">"
}

// TableCommits is sync.*.commit.<table>: one table across partitions.
func TableCommits(table string) (string, error) {
	if err := CheckTable(table); err != nil {
		return "", err
	}
	return commitPrefix + "*" + commitInfix + table, nil
}

// ParseCommitSubject splits sync.<token>.commit.<table>.
func ParseCommitSubject(subject string) (token, table string, ok bool) {
	if len(subject) < len(commitPrefix) || subject[:len(commitPrefix)] != commitPrefix {
		return "", "", false
	}
	rest := subject[len(commitPrefix):]
	for i := 0; i+len(commitInfix) <= len(rest); i++ {
		if rest[i] == '.' {
			if rest[i:i+len(commitInfix)] != commitInfix {
				return "", "", false
			}
			token, table = rest[:i], rest[i+len(commitInfix):]
			if token == "" || CheckTable(table) != nil {
				return "", "", false
			}
			return token, table, true
		}
	}
	return "", "", false
}

// ControlSubject is syncctl.<partition>.<event>.
func ControlSubject(p Partition, event string) (string, error) {
	if err := checkEvent(event); err != nil {
		return "", err
	}
	return controlPrefix + p.token + "." + event, nil
}

// PartitionControl is syncctl.<partition>.>.
func PartitionControl(p Partition) string {
	return controlPrefix + p.token + ".>"
}

func checkEvent(event string) error {
	if event == "" || len(event) > 64 {
		return fmt.Errorf("%w: %q", ErrInvalidEvent, event)
	}
	for i := 0; i < len(event); i++ {
		c := event[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q", ErrInvalidEvent, event)
		}
	}
	return nil
}

// GateKey is the serve-gate KV key of a partition: gate.<partition>.
func GateKey(p Partition) string {
	return "gate." + p.token
}
