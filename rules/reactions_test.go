package rules

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/ssp2"
)

// ops: an insert of t1, an update of t2 (done false → true), a delete of
// t3, and a delete of an absent row.
func reactionOps() engine.CommitValidation {
	return engine.CommitValidation{
		ClientID: "c1", ClientCommitID: "cc", ActorID: "alice", Partition: "acme",
		Operations: []engine.OperationEvidence{
			{OpIndex: 0, Op: ssp2.OpUpsert, Table: "tasks", RowID: "t1",
				Row: engine.Row{"id": "t1", "title": "new", "done": false, "n": int64(1), "blob": []byte("hi"), "meta": json.RawMessage(`{"a":1}`)}},
			{OpIndex: 1, Op: ssp2.OpUpsert, Table: "tasks", RowID: "t2",
				Row:    engine.Row{"id": "t2", "title": "renamed", "done": true, "n": int64(2)},
				Stored: engine.Row{"id": "t2", "title": "old", "done": false, "n": int64(2)}},
			{OpIndex: 2, Op: ssp2.OpDelete, Table: "tasks", RowID: "t3", Stored: engine.Row{"id": "t3", "title": "gone", "done": true}},
			{OpIndex: 3, Op: ssp2.OpDelete, Table: "tasks", RowID: "t4"},
		},
	}
}

func plan(t *testing.T, rules ...ReactionRule) []engine.PlannedReaction {
	t.Helper()
	p, err := CompileReactions(mustSchema(t), rules)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p(context.Background(), reactionOps())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func keys(ps []engine.PlannedReaction) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Key)
	}
	return out
}

func TestReactionRuleOperationKinds(t *testing.T) {
	for on, want := range map[string][]string{
		OnInsert: {"r/0"},
		OnUpdate: {"r/1"},
		OnUpsert: {"r/0", "r/1"},
		OnDelete: {"r/2"},
		OnAny:    {"r/0", "r/1", "r/2"},
	} {
		got := keys(plan(t, ReactionRule{Name: "r", Table: "tasks", On: on, Type: "t"}))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("on %s: planned %v, want %v", on, got, want)
		}
	}
}

func TestReactionRuleConditionsAndPayload(t *testing.T) {
	got := plan(t, ReactionRule{
		Name: "done-mail", Table: "tasks", On: OnUpsert, Type: "email.send", Version: 3, MaxAttempts: 5,
		When:    []ReactionCondition{{Column: "done", Equals: true, Changed: true}},
		Payload: map[string]string{"task": "new.id", "title": "new.title", "was": "old.title", "by": "$actorId", "op": "$op", "commit": "$clientCommitId"},
	})
	if len(got) != 1 {
		t.Fatalf("planned %+v, want the update that set done", got)
	}
	p := got[0]
	if p.Key != "done-mail/1" || p.Type != "email.send" || p.Version != 3 || p.MaxAttempts != 5 {
		t.Fatalf("planned %+v", p)
	}
	b, _ := json.Marshal(p.Payload)
	if want := `{"by":"alice","commit":"cc","op":"update","task":"t2","title":"renamed","was":"old"}`; string(b) != want {
		t.Fatalf("payload %s, want %s", b, want)
	}

	// Values render as in commit events; an absent old row is null.
	got = plan(t, ReactionRule{Name: "r", Table: "tasks", On: OnInsert, Type: "t",
		Payload: map[string]string{"blob": "new.blob", "meta": "new.meta", "n": "new.n", "title": "new.title"}})
	b, _ = json.Marshal(got[0].Payload)
	if want := `{"blob":"aGk=","meta":{"a":1},"n":1,"title":"new"}`; string(b) != want {
		t.Fatalf("payload %s, want %s", b, want)
	}
	got = plan(t, ReactionRule{Name: "r", Table: "tasks", On: OnUpsert, Type: "t", Payload: map[string]string{"was": "old.title"}})
	b, _ = json.Marshal(got[0].Payload)
	if string(b) != `{"was":null}` {
		t.Fatalf("old row of an insert rendered %s, want null", b)
	}

	// Conditions on the old row, changed alone, and several rules.
	got = plan(t,
		ReactionRule{Name: "a", Table: "tasks", On: OnAny, Type: "t", When: []ReactionCondition{{Column: "done", Row: "old", Equals: true}}},
		ReactionRule{Name: "b", Table: "tasks", On: OnUpsert, Type: "t", When: []ReactionCondition{{Column: "title", Changed: true}}},
		ReactionRule{Name: "c", Table: "tasks", On: OnUpsert, Type: "t", When: []ReactionCondition{{Column: "n", Changed: true}}},
	)
	if want := []string{"b/0", "c/0", "b/1", "a/2"}; !reflect.DeepEqual(keys(got), want) {
		t.Fatalf("planned %v, want %v", keys(got), want)
	}
}

func TestReactionRuleCompileErrors(t *testing.T) {
	base := ReactionRule{Name: "r", Table: "tasks", On: OnUpsert, Type: "t"}
	for _, tc := range []struct {
		name string
		edit func(*ReactionRule)
		want string
	}{
		{"bad name", func(r *ReactionRule) { r.Name = "R 1" }, "name"},
		{"unknown table", func(r *ReactionRule) { r.Table = "nope" }, "unknown table"},
		{"no on", func(r *ReactionRule) { r.On = "" }, "on is required"},
		{"bad on", func(r *ReactionRule) { r.On = "create" }, "create"},
		{"bad type", func(r *ReactionRule) { r.Type = "a b" }, "reaction type"},
		{"bad version", func(r *ReactionRule) { r.Version = -1 }, "version"},
		{"bad attempts", func(r *ReactionRule) { r.MaxAttempts = 101 }, "max_attempts"},
		{"unknown column", func(r *ReactionRule) { r.When = []ReactionCondition{{Column: "x", Changed: true}} }, "no column"},
		{"empty condition", func(r *ReactionRule) { r.When = []ReactionCondition{{Column: "done"}} }, "equals, changed"},
		{"value never fits", func(r *ReactionRule) { r.When = []ReactionCondition{{Column: "done", Equals: "yes"}} }, "never equal"},
		{"bad row", func(r *ReactionRule) { r.When = []ReactionCondition{{Column: "done", Row: "mid", Changed: true}} }, "neither new nor old"},
		{"new row of a delete", func(r *ReactionRule) {
			r.On = OnDelete
			r.When = []ReactionCondition{{Column: "done", Equals: true}}
		}, "no new row"},
		{"old payload of an insert", func(r *ReactionRule) { r.On = OnInsert; r.Payload = map[string]string{"x": "old.title"} }, "never set"},
		{"new payload of a delete", func(r *ReactionRule) { r.On = OnDelete; r.Payload = map[string]string{"x": "new.title"} }, "never set"},
		{"unknown payload column", func(r *ReactionRule) { r.Payload = map[string]string{"x": "new.nope"} }, "no column"},
		{"unknown meta", func(r *ReactionRule) { r.Payload = map[string]string{"x": "$now"} }, "unknown source"},
		{"bare column", func(r *ReactionRule) { r.Payload = map[string]string{"x": "title"} }, "not new.<column>"},
	} {
		r := base
		tc.edit(&r)
		_, err := CompileReactions(mustSchema(t), []ReactionRule{r})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %q", tc.name, err, tc.want)
		}
	}
	if _, err := CompileReactions(mustSchema(t), []ReactionRule{base, base}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate names: %v", err)
	}
	if p, err := CompileReactions(mustSchema(t), nil); p != nil || err != nil {
		t.Errorf("no rules = %v, %v; want no planner", p, err)
	}
}

// The rules decode from the TOML of a config file.
func TestReactionRuleTOML(t *testing.T) {
	var cfg struct {
		Rules []ReactionRule `toml:"rules"`
	}
	_, err := toml.Decode(`
[[rules]]
name = "done-mail"
table = "tasks"
on = "update"
type = "email.send"
max_attempts = 3
payload = { task = "new.id" }
[[rules.when]]
column = "done"
equals = true
changed = true
[[rules.when]]
column = "n"
equals = 2
`, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := plan(t, cfg.Rules...)
	if len(got) != 1 || got[0].Key != "done-mail/1" || got[0].MaxAttempts != 3 {
		t.Fatalf("planned %+v", got)
	}
}
