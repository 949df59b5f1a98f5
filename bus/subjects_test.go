package bus

import (
	"errors"
	"strings"
	"testing"
)

func mustPartition(t testing.TB, id string) Partition {
	t.Helper()
	p, err := NewPartition(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	p := mustPartition(t, "a.b")
	s, err := CommitSubject(p, "todos")
	if err != nil || s != "sync.a=2Eb.commit.todos" {
		t.Errorf("CommitSubject = %q, %v", s, err)
	}
	if got := PartitionCommits(p); got != "sync.a=2Eb.commit.>" {
		t.Errorf("PartitionCommits = %q", got)
	}
	if got, _ := TableCommits("todos"); got != "sync.*.commit.todos" {
		t.Errorf("TableCommits = %q", got)
	}
	if got, _ := ControlSubject(p, "epoch"); got != "syncctl.a=2Eb.epoch" {
		t.Errorf("ControlSubject = %q", got)
	}
	if got := GateKey(p); got != "gate.a=2Eb" {
		t.Errorf("GateKey = %q", got)
	}
	tok, table, ok := ParseCommitSubject(s)
	if !ok || tok != "a=2Eb" || table != "todos" {
		t.Errorf("ParseCommitSubject(%q) = %q, %q, %v", s, tok, table, ok)
	}
	for _, bad := range []string{"sync.a.b.commit.t", "sync..commit.t", "sync.a.commit.", "sync.a.commit.1t", "sync.a.other.t", "x.a.commit.t", "sync.a"} {
		if _, _, ok := ParseCommitSubject(bad); ok {
			t.Errorf("ParseCommitSubject(%q) accepted", bad)
		}
	}
}

func TestCheckTable(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"todos", "_x", "T1", strings.Repeat("a", 63)} {
		if err := CheckTable(ok); err != nil {
			t.Errorf("CheckTable(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1t", "a.b", "a*", ">", "a b", "é", strings.Repeat("a", 64)} {
		if err := CheckTable(bad); !errors.Is(err, ErrInvalidTable) {
			t.Errorf("CheckTable(%q) = %v, want ErrInvalidTable", bad, err)
		}
		if _, err := CommitSubject(mustPartition(t, "p"), bad); !errors.Is(err, ErrInvalidTable) {
			t.Errorf("CommitSubject(table %q) = %v, want ErrInvalidTable", bad, err)
		}
	}
	for _, bad := range []string{"", "a.b", "A", "*", strings.Repeat("a", 65)} {
		if _, err := ControlSubject(mustPartition(t, "p"), bad); !errors.Is(err, ErrInvalidEvent) {
			t.Errorf("ControlSubject(event %q) = %v, want ErrInvalidEvent", bad, err)
		}
	}
}

func TestCheckNode(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"node-1", "eu.west_2", "N"} {
		if err := CheckNode(ok); err != nil {
			t.Errorf("CheckNode(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a b", "a/b", "*", ">", "é", "a:b"} {
		if err := CheckNode(bad); !errors.Is(err, ErrInvalidNode) {
			t.Errorf("CheckNode(%q) = %v, want ErrInvalidNode", bad, err)
		}
	}
}
