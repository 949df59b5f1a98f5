// Package rules compiles declarative write rules into real engine
// validators, so operators of the syncnode binary can validate writes
// without writing Go (SPEC.md §6.7, §6.8). The same JSON shapes drive the
// test-control surface (package testctl), where conformance harnesses
// install them at runtime.
//
// A rules file is JSON:
//
//	{"validators": [
//	   {"table": "tasks", "rule": {"kind": "maxLength", "column": "title", "max": 200, "code": "app.title_too_long"}},
//	   {"table": "tasks", "rule": {"kind": "immutableWhen", "column": "title",
//	                               "guardColumn": "done", "guardValue": true, "code": "app.done_task_frozen"}}],
//	 "commitValidators": [
//	   {"kind": "requireSiblingWhen", "table": "orders", "column": "status", "equals": "paid",
//	    "siblingRowIdSuffix": ":invoice", "code": "app.invoice_required"}]}
//
// Per-table rules (§6.7):
//   - maxLength rejects an upsert whose string (or json) column is longer
//     than max, counted in UTF-16 code units as JavaScript counts a
//     string's length, so a limit means the same to a TypeScript client.
//   - immutableWhen rejects an update (a stored row exists) that changes
//     column while the stored row's guardColumn equals guardValue.
//
// Whole-commit rules (§6.8):
//   - requireSiblingWhen rejects a commit that writes a row of table whose
//     column equals equals, unless the same commit also writes (upserts or
//     deletes) the row of table whose id is that row's id followed by
//     siblingRowIdSuffix. The rejection names the triggering operation.
//
// Several rules on one table, and several commit rules, run in file order;
// the first rejection wins. Codes are host codes: they may not start with
// a protocol prefix (sync., blob., operation., presence., client.).
// Values to compare (guardValue, equals) are JSON: strings, numbers,
// booleans, null, and {"$bytes": "<hex>"} for bytes columns; a json column
// compares by its raw text as a JSON string.
package rules

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"unicode/utf16"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// Rule kinds.
const (
	KindMaxLength          = "maxLength"
	KindImmutableWhen      = "immutableWhen"
	KindRequireSiblingWhen = "requireSiblingWhen"
)

// Set is a rules file.
type Set struct {
	Validators       []TableRule  `json:"validators"`
	CommitValidators []CommitRule `json:"commitValidators"`
}

// TableRule is one per-table rule.
type TableRule struct {
	Table string  `json:"table"`
	Rule  RowRule `json:"rule"`
}

// RowRule is a per-table rule: maxLength (Column, Max) or immutableWhen
// (Column, GuardColumn, GuardValue).
type RowRule struct {
	Kind        string          `json:"kind"`
	Column      string          `json:"column"`
	Max         *int64          `json:"max,omitempty"`
	GuardColumn string          `json:"guardColumn,omitempty"`
	GuardValue  json.RawMessage `json:"guardValue,omitempty"`
	Code        string          `json:"code"`
}

// CommitRule is a whole-commit rule: requireSiblingWhen.
type CommitRule struct {
	Kind               string          `json:"kind"`
	Table              string          `json:"table"`
	Column             string          `json:"column"`
	Equals             json.RawMessage `json:"equals"`
	SiblingRowIDSuffix string          `json:"siblingRowIdSuffix"`
	Code               string          `json:"code"`
}

// Load reads a rules file; unknown fields are refused, so a misspelt key
// is not silently ignored.
func Load(path string) (Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Set{}, fmt.Errorf("load rules: %w", err)
	}
	var s Set
	if err := Decode(b, &s); err != nil {
		return Set{}, fmt.Errorf("load rules %s: %w", path, err)
	}
	return s, nil
}

// Decode decodes JSON into v, refusing unknown fields and trailing data.
func Decode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// Compile compiles the set against s.
func (set Set) Compile(s *schema.Schema) (map[string]engine.RowValidator, engine.CommitValidator, error) {
	rows, err := CompileRows(s, set.Validators)
	if err != nil {
		return nil, nil, err
	}
	commit, err := CompileCommit(s, set.CommitValidators)
	if err != nil {
		return nil, nil, err
	}
	return rows, commit, nil
}

// CompileRows compiles per-table rules into one validator per table. It
// refuses unknown kinds, tables and columns, reserved or empty codes, and
// values that do not fit.
func CompileRows(s *schema.Schema, rules []TableRule) (map[string]engine.RowValidator, error) {
	byTable := map[string][]engine.RowValidator{}
	for i, tr := range rules {
		v, err := compileRow(s, tr)
		if err != nil {
			return nil, fmt.Errorf("validators[%d]: %w", i, err)
		}
		byTable[tr.Table] = append(byTable[tr.Table], v)
	}
	out := make(map[string]engine.RowValidator, len(byTable))
	for table, vs := range byTable {
		out[table] = chainRows(vs)
	}
	return out, nil
}

func chainRows(vs []engine.RowValidator) engine.RowValidator {
	if len(vs) == 1 {
		return vs[0]
	}
	return func(ctx context.Context, v engine.RowValidation) error {
		for _, f := range vs {
			if err := f(ctx, v); err != nil {
				return err
			}
		}
		return nil
	}
}

// CompileCommit compiles whole-commit rules into one validator (nil when
// there are none).
func CompileCommit(s *schema.Schema, rules []CommitRule) (engine.CommitValidator, error) {
	var vs []engine.CommitValidator
	for i, r := range rules {
		v, err := compileCommit(s, r)
		if err != nil {
			return nil, fmt.Errorf("commitValidators[%d]: %w", i, err)
		}
		vs = append(vs, v)
	}
	switch len(vs) {
	case 0:
		return nil, nil
	case 1:
		return vs[0], nil
	}
	return func(ctx context.Context, v engine.CommitValidation) error {
		for _, f := range vs {
			if err := f(ctx, v); err != nil {
				return err
			}
		}
		return nil
	}, nil
}

func column(t *schema.Table, name, field string) (schema.Column, error) {
	if name == "" {
		return schema.Column{}, fmt.Errorf("%s is required", field)
	}
	i, ok := t.ColumnIndex(name)
	if !ok {
		return schema.Column{}, fmt.Errorf("%s: table %s has no column %q", field, t.Name, name)
	}
	return t.Columns[i], nil
}

func lookupTable(s *schema.Schema, name string) (*schema.Table, error) {
	if name == "" {
		return nil, errors.New("table is required")
	}
	t, ok := s.Table(name)
	if !ok {
		return nil, fmt.Errorf("unknown table %q", name)
	}
	return t, nil
}

func compileRow(s *schema.Schema, tr TableRule) (engine.RowValidator, error) {
	t, err := lookupTable(s, tr.Table)
	if err != nil {
		return nil, err
	}
	r := tr.Rule
	if err := engine.ValidateHostCode(r.Code); err != nil {
		return nil, err
	}
	col, err := column(t, r.Column, "column")
	if err != nil {
		return nil, err
	}
	switch r.Kind {
	case KindMaxLength:
		if col.Type != ssp2.TypeString && col.Type != ssp2.TypeJSON {
			return nil, fmt.Errorf("maxLength: column %s is %s, not string or json", col.Name, col.Type)
		}
		if r.Max == nil || *r.Max < 0 {
			return nil, errors.New("maxLength: max must be a non-negative integer")
		}
		return maxLength(col.Name, *r.Max, r.Code), nil
	case KindImmutableWhen:
		guard, err := column(t, r.GuardColumn, "guardColumn")
		if err != nil {
			return nil, err
		}
		m, err := parseValue(r.GuardValue, guard.Type)
		if err != nil {
			return nil, fmt.Errorf("immutableWhen: guardValue: %w", err)
		}
		return immutableWhen(col.Name, guard.Name, m, r.Code), nil
	case "":
		return nil, errors.New("kind is required")
	default:
		return nil, fmt.Errorf("unknown rule kind %q (want %s or %s)", r.Kind, KindMaxLength, KindImmutableWhen)
	}
}

func compileCommit(s *schema.Schema, r CommitRule) (engine.CommitValidator, error) {
	if r.Kind != KindRequireSiblingWhen {
		return nil, fmt.Errorf("unknown commit rule kind %q (want %s)", r.Kind, KindRequireSiblingWhen)
	}
	t, err := lookupTable(s, r.Table)
	if err != nil {
		return nil, err
	}
	if err := engine.ValidateHostCode(r.Code); err != nil {
		return nil, err
	}
	col, err := column(t, r.Column, "column")
	if err != nil {
		return nil, err
	}
	m, err := parseValue(r.Equals, col.Type)
	if err != nil {
		return nil, fmt.Errorf("requireSiblingWhen: equals: %w", err)
	}
	if r.SiblingRowIDSuffix == "" {
		return nil, errors.New("requireSiblingWhen: siblingRowIdSuffix must not be empty")
	}
	return requireSiblingWhen(t.Name, col.Name, m, r.SiblingRowIDSuffix, r.Code), nil
}

// utf16Len is a string's length in UTF-16 code units.
func utf16Len(s string) int64 {
	n := int64(0)
	for _, r := range s {
		n += int64(utf16.RuneLen(r))
	}
	return n
}

func maxLength(col string, max int64, code string) engine.RowValidator {
	return func(_ context.Context, v engine.RowValidation) error {
		if v.Row == nil { // deletes carry no row
			return nil
		}
		var text string
		switch x := v.Row[col].(type) {
		case string:
			text = x
		case json.RawMessage:
			text = string(x)
		default:
			return nil
		}
		if utf16Len(text) <= max {
			return nil
		}
		r := engine.Reject(code, fmt.Sprintf("%s exceeds %d characters", col, max))
		r.Details = &engine.RejectionDetails{FieldPaths: []string{col}, Reason: "max_length_exceeded", RequiredAction: "edit_fields"}
		return r
	}
}

func immutableWhen(col, guardCol string, guard value, code string) engine.RowValidator {
	return func(_ context.Context, v engine.RowValidation) error {
		if v.Row == nil || v.Stored == nil { // inserts and deletes
			return nil
		}
		if !guard.matches(v.Stored[guardCol]) || sameValue(v.Row[col], v.Stored[col]) {
			return nil
		}
		r := engine.Reject(code, fmt.Sprintf("%s is immutable while %s is %s", col, guardCol, guard.text))
		r.Details = &engine.RejectionDetails{FieldPaths: []string{col}, Reason: "immutable_state", RequiredAction: "keep_server"}
		return r
	}
}

func requireSiblingWhen(table, col string, equals value, suffix, code string) engine.CommitValidator {
	return func(_ context.Context, v engine.CommitValidation) error {
		var trigger *engine.OperationEvidence
		for i := range v.Operations {
			op := &v.Operations[i]
			if op.Table == table && op.Row != nil && equals.matches(op.Row[col]) {
				trigger = op
				break
			}
		}
		if trigger == nil {
			return nil
		}
		want := trigger.RowID + suffix
		for _, op := range v.Operations {
			if op.Table == table && op.RowID == want {
				return nil
			}
		}
		r := engine.Reject(code, fmt.Sprintf("a row of %s with %s = %s needs its sibling %q in the same commit", table, col, equals.text, want))
		r.OpIndex = trigger.OpIndex
		r.Details = &engine.RejectionDetails{FieldPaths: []string{col}, Reason: "missing_sibling_operation", RequiredAction: "repair_aggregate"}
		return r
	}
}

// value is a parsed comparison value.
type value struct {
	null  bool
	str   *string
	num   *float64
	exact *int64 // the number, when it is an integer
	b     *bool
	bytes []byte // {"$bytes": hex}
	text  string // as written, for messages
}

// parseValue parses a JSON comparison value for a column of type typ.
func parseValue(raw json.RawMessage, typ ssp2.ColumnType) (value, error) {
	raw = bytes.TrimSpace(raw)
	v := value{text: string(raw)}
	if len(raw) == 0 {
		return v, errors.New("required")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return v, err
	}
	switch x := x.(type) {
	case nil:
		v.null = true
	case string:
		v.str = &x
	case bool:
		v.b = &x
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return v, err
		}
		v.num = &f
		if i, err := x.Int64(); err == nil {
			v.exact = &i
		}
	case map[string]any:
		h, ok := x["$bytes"].(string)
		if len(x) != 1 || !ok {
			return v, errors.New(`an object must be {"$bytes": "<hex>"}`)
		}
		b, err := hex.DecodeString(h)
		if err != nil {
			return v, fmt.Errorf("$bytes: %w", err)
		}
		v.bytes = b
	default:
		return v, fmt.Errorf("%s is not a string, number, boolean, null or {\"$bytes\": …}", raw)
	}
	if !v.fits(typ) {
		return v, fmt.Errorf("%s can never equal a %s column", raw, typ)
	}
	return v, nil
}

// fits reports whether a value of this kind can be held by a column.
func (v value) fits(typ ssp2.ColumnType) bool {
	switch {
	case v.null:
		return true
	case v.str != nil:
		return typ == ssp2.TypeString || typ == ssp2.TypeJSON || typ == ssp2.TypeBlobRef
	case v.num != nil:
		return typ == ssp2.TypeInteger || typ == ssp2.TypeFloat
	case v.b != nil:
		return typ == ssp2.TypeBoolean
	default:
		return typ == ssp2.TypeBytes || typ == ssp2.TypeCrdt
	}
}

// matches compares v with a decoded engine row value.
func (v value) matches(x any) bool {
	switch x := x.(type) {
	case nil:
		return v.null
	case string:
		return v.str != nil && *v.str == x
	case json.RawMessage:
		return v.str != nil && *v.str == string(x)
	case bool:
		return v.b != nil && *v.b == x
	case int64:
		if v.exact != nil {
			return *v.exact == x
		}
		return v.num != nil && *v.num == float64(x)
	case float64:
		return v.num != nil && !math.IsNaN(x) && *v.num == x
	case []byte:
		return v.bytes != nil && bytes.Equal(v.bytes, x)
	}
	return false
}

// sameValue compares two decoded values of one column.
func sameValue(a, b any) bool {
	switch a := a.(type) {
	case []byte:
		bb, ok := b.([]byte)
		return ok && bytes.Equal(a, bb)
	case json.RawMessage:
		bb, ok := b.(json.RawMessage)
		return ok && bytes.Equal(a, bb)
	case float64:
		bf, ok := b.(float64)
		return ok && (a == bf || math.IsNaN(a) && math.IsNaN(bf))
	}
	return a == b
}
