package rules

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

const testSchema = `{"version":1,"tables":[{"name":"tasks","primaryKey":"id","scopes":["project:{project_id}"],"columns":[
	{"name":"id","type":"string"},{"name":"project_id","type":"string"},
	{"name":"title","type":"string","nullable":true},{"name":"done","type":"boolean"},
	{"name":"n","type":"integer","nullable":true},{"name":"meta","type":"json","nullable":true},
	{"name":"blob","type":"bytes","nullable":true}]}]}`

func mustSchema(t *testing.T) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func compileOne(t *testing.T, rule string) engine.RowValidator {
	t.Helper()
	var r RowRule
	if err := Decode([]byte(rule), &r); err != nil {
		t.Fatal(err)
	}
	vs, err := CompileRows(mustSchema(t), []TableRule{{Table: "tasks", Rule: r}})
	if err != nil {
		t.Fatal(err)
	}
	return vs["tasks"]
}

// code returns the rejection code of err, "" for nil; any other error
// fails the test.
func code(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var rj *engine.Rejection
	if !errors.As(err, &rj) {
		t.Fatalf("validator returned %v, not a *Rejection", err)
	}
	return rj.Code
}

func TestMaxLength(t *testing.T) {
	v := compileOne(t, `{"kind":"maxLength","column":"title","max":3,"code":"app.long"}`)
	cases := []struct {
		name string
		row  engine.Row
		want string
	}{
		{"short", engine.Row{"title": "abc"}, ""},
		{"long", engine.Row{"title": "abcd"}, "app.long"},
		{"null", engine.Row{"title": nil}, ""},
		{"three runes, three units", engine.Row{"title": "éàü"}, ""},
		{"one astral rune is two units", engine.Row{"title": "ab😀"}, "app.long"},
		{"delete", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := code(t, v(context.Background(), engine.RowValidation{Row: tc.row})); got != tc.want {
				t.Fatalf("code = %q, want %q", got, tc.want)
			}
		})
	}
	var rj *engine.Rejection
	errors.As(v(context.Background(), engine.RowValidation{Row: engine.Row{"title": "long!"}}), &rj)
	if d := rj.Details; d == nil || d.Reason != "max_length_exceeded" || d.RequiredAction != "edit_fields" || d.FieldPaths[0] != "title" {
		t.Fatalf("details = %+v", rj.Details)
	}
}

func TestImmutableWhen(t *testing.T) {
	v := compileOne(t, `{"kind":"immutableWhen","column":"title","guardColumn":"done","guardValue":true,"code":"app.frozen"}`)
	done := engine.Row{"title": "a", "done": true}
	open := engine.Row{"title": "a", "done": false}
	cases := []struct {
		name        string
		row, stored engine.Row
		want        string
	}{
		{"insert", engine.Row{"title": "b", "done": true}, nil, ""},
		{"change while stored done", engine.Row{"title": "b", "done": true}, done, "app.frozen"},
		{"change while stored done, un-doing", engine.Row{"title": "b", "done": false}, done, "app.frozen"},
		{"same title while done", engine.Row{"title": "a", "done": true}, done, ""},
		{"change while stored open", engine.Row{"title": "b", "done": true}, open, ""},
		{"delete", nil, done, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := code(t, v(context.Background(), engine.RowValidation{Row: tc.row, Stored: tc.stored})); got != tc.want {
				t.Fatalf("code = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestGuardValues(t *testing.T) {
	cases := []struct {
		column, guard string
		stored        any
		want          bool
	}{
		{"n", `7`, int64(7), true},
		{"n", `7.0`, int64(7), true},
		{"n", `8`, int64(7), false},
		{"n", `null`, nil, true},
		{"title", `"x"`, "x", true},
		{"title", `"x"`, nil, false},
		{"meta", `"{\"a\":1}"`, json.RawMessage(`{"a":1}`), true},
		{"blob", `{"$bytes":"00ff"}`, []byte{0, 0xff}, true},
		{"blob", `{"$bytes":"00fe"}`, []byte{0, 0xff}, false},
	}
	for _, tc := range cases {
		v := compileOne(t, `{"kind":"immutableWhen","column":"title","guardColumn":"`+tc.column+`","guardValue":`+tc.guard+`,"code":"app.x"}`)
		got := code(t, v(context.Background(), engine.RowValidation{
			Row: engine.Row{"title": "new"}, Stored: engine.Row{"title": "old", tc.column: tc.stored},
		})) != ""
		if got != tc.want {
			t.Errorf("guard %s on %s = %v: fired %v, want %v", tc.guard, tc.column, tc.stored, got, tc.want)
		}
	}
}

func TestRequireSiblingWhen(t *testing.T) {
	var r CommitRule
	if err := Decode([]byte(`{"kind":"requireSiblingWhen","table":"tasks","column":"title","equals":"parent","siblingRowIdSuffix":"-child","code":"app.sibling"}`), &r); err != nil {
		t.Fatal(err)
	}
	v, err := CompileCommit(mustSchema(t), []CommitRule{r})
	if err != nil {
		t.Fatal(err)
	}
	op := func(i int, op ssp2.Op, id, title string) engine.OperationEvidence {
		e := engine.OperationEvidence{OpIndex: i, Op: op, Table: "tasks", RowID: id}
		if op == ssp2.OpUpsert {
			e.Row = engine.Row{"id": id, "title": title}
		}
		return e
	}
	cases := []struct {
		name    string
		ops     []engine.OperationEvidence
		want    string
		opIndex int
	}{
		{"no trigger", []engine.OperationEvidence{op(0, ssp2.OpUpsert, "a", "other")}, "", 0},
		{"trigger alone", []engine.OperationEvidence{op(0, ssp2.OpUpsert, "x", "y"), op(1, ssp2.OpUpsert, "a", "parent")}, "app.sibling", 1},
		{"trigger with sibling", []engine.OperationEvidence{op(0, ssp2.OpUpsert, "a", "parent"), op(1, ssp2.OpUpsert, "a-child", "c")}, "", 0},
		{"sibling deleted counts", []engine.OperationEvidence{op(0, ssp2.OpUpsert, "a", "parent"), op(1, ssp2.OpDelete, "a-child", "")}, "", 0},
		{"wrong sibling", []engine.OperationEvidence{op(0, ssp2.OpUpsert, "a", "parent"), op(1, ssp2.OpUpsert, "b-child", "c")}, "app.sibling", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := v(context.Background(), engine.CommitValidation{Operations: tc.ops})
			if got := code(t, err); got != tc.want {
				t.Fatalf("code = %q, want %q", got, tc.want)
			}
			var rj *engine.Rejection
			if errors.As(err, &rj) && (rj.OpIndex != tc.opIndex || rj.Details.Reason != "missing_sibling_operation") {
				t.Fatalf("rejection = %+v", rj)
			}
		})
	}
}

func TestCompileRefusals(t *testing.T) {
	s := mustSchema(t)
	rows := []struct{ name, table, rule, want string }{
		{"reserved code", "tasks", `{"kind":"maxLength","column":"title","max":1,"code":"sync.nope"}`, "reserved"},
		{"empty code", "tasks", `{"kind":"maxLength","column":"title","max":1,"code":""}`, "empty"},
		{"unknown table", "nope", `{"kind":"maxLength","column":"title","max":1,"code":"app.x"}`, "unknown table"},
		{"unknown column", "tasks", `{"kind":"maxLength","column":"nope","max":1,"code":"app.x"}`, "no column"},
		{"maxLength on integer", "tasks", `{"kind":"maxLength","column":"n","max":1,"code":"app.x"}`, "not string"},
		{"maxLength without max", "tasks", `{"kind":"maxLength","column":"title","code":"app.x"}`, "max"},
		{"unknown kind", "tasks", `{"kind":"minLength","column":"title","code":"app.x"}`, "unknown rule kind"},
		{"guard of the wrong type", "tasks", `{"kind":"immutableWhen","column":"title","guardColumn":"done","guardValue":"yes","code":"app.x"}`, "never equal"},
		{"guard missing", "tasks", `{"kind":"immutableWhen","column":"title","guardColumn":"done","code":"app.x"}`, "required"},
	}
	for _, tc := range rows {
		var r RowRule
		if err := Decode([]byte(tc.rule), &r); err != nil {
			t.Fatal(err)
		}
		_, err := CompileRows(s, []TableRule{{Table: tc.table, Rule: r}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	if _, err := CompileCommit(s, []CommitRule{{Kind: KindRequireSiblingWhen, Table: "tasks", Column: "title", Equals: json.RawMessage(`"x"`), Code: "app.x"}}); err == nil {
		t.Error("an empty sibling suffix was accepted")
	}
	var r RowRule
	if err := Decode([]byte(`{"kind":"maxLength","colum":"title"}`), &r); err == nil {
		t.Error("a misspelt field was accepted")
	}
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.json")
	doc := `{"validators":[
		{"table":"tasks","rule":{"kind":"maxLength","column":"title","max":5,"code":"app.long"}},
		{"table":"tasks","rule":{"kind":"immutableWhen","column":"title","guardColumn":"done","guardValue":true,"code":"app.frozen"}}],
	 "commitValidators":[{"kind":"requireSiblingWhen","table":"tasks","column":"title","equals":"p","siblingRowIdSuffix":":c","code":"app.sib"}]}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rows, commit, err := set.Compile(mustSchema(t))
	if err != nil || commit == nil || len(rows) != 1 {
		t.Fatalf("Compile = %d row validators, commit %v, %v", len(rows), commit != nil, err)
	}
	// Both rules of tasks run, in order.
	v := rows["tasks"]
	if got := code(t, v(context.Background(), engine.RowValidation{Row: engine.Row{"title": "too long"}})); got != "app.long" {
		t.Fatalf("first rule: %q", got)
	}
	if got := code(t, v(context.Background(), engine.RowValidation{Row: engine.Row{"title": "b"}, Stored: engine.Row{"title": "a", "done": true}})); got != "app.frozen" {
		t.Fatalf("second rule: %q", got)
	}
}
