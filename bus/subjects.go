package bus

import (
	"errors"
	"fmt"
	"strings"
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
func (n Names) CommitSubject(p Partition, table string) (string, error) {
	if err := CheckTable(table); err != nil {
		return "", err
	}
	return n.commitSubject(p.token, table), nil
}

func (n Names) commitSubject(token, table string) string {
	if n.prefix == "" {
		return commitPrefix + token + commitInfix + table
	}
	return n.prefix + "." + commitPrefix + token + commitInfix + table
}

// PartitionCommits is sync.<partition>.commit.>: every table of one
// partition. It is the relay's compare-and-set subject.
func (n Names) PartitionCommits(p Partition) string {
	return n.subject(commitPrefix + p.token + commitInfix + ">")
}

// TableCommits is sync.*.commit.<table>: one table across partitions.
func (n Names) TableCommits(table string) (string, error) {
	if err := CheckTable(table); err != nil {
		return "", err
	}
	return n.subject(commitPrefix + "*" + commitInfix + table), nil
}

// ParseCommitSubject splits sync.<token>.commit.<table> of this
// namespace.
func (n Names) ParseCommitSubject(subject string) (token, table string, ok bool) {
	if subject, ok = n.unprefix(subject); !ok {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(subject, commitPrefix)
	if !ok {
		return "", "", false
	}
	i := strings.IndexByte(rest, '.')
	if i <= 0 || !strings.HasPrefix(rest[i:], commitInfix) {
		return "", "", false
	}
	token, table = rest[:i], rest[i+len(commitInfix):]
	if CheckTable(table) != nil {
		return "", "", false
	}
	return token, table, true
}

// ControlSubject is syncctl.<partition>.<event>.
func (n Names) ControlSubject(p Partition, event string) (string, error) {
	if err := checkEvent(event); err != nil {
		return "", err
	}
	return n.subject(controlPrefix + p.token + "." + event), nil
}

// PartitionControl is syncctl.<partition>.>.
func (n Names) PartitionControl(p Partition) string {
	return n.subject(controlPrefix + p.token + ".>")
}

// GlobalControlSubject is syncctl.=global.<event>.
func (n Names) GlobalControlSubject(event string) (string, error) {
	if err := checkEvent(event); err != nil {
		return "", err
	}
	return n.subject(controlPrefix + GlobalToken + "." + event), nil
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
