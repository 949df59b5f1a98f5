package client

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/syncnode/syncnode/schema"
	"github.com/syncnode/syncnode/ssp2"
)

// rowValues converts a row given by column name into the table's typed
// values and returns them with the row's rowId and the columns it names.
// Every column must be given unless it is nullable (absent means NULL: an
// upsert writes the full row) — or, for a patch, unless it is not the
// primary key: a patch writes only the columns it names, and the values
// of the others are meaningless. Values are accepted in their Go or
// encoding/json forms:
//
//	string            string
//	integer           int*, uint*, integral float64, json.Number
//	float             float*, int*, uint*, json.Number
//	boolean           bool
//	json              json.RawMessage (validated), or any value to marshal
//	blob_ref          json.RawMessage, a string holding the JSON, or a value to marshal
//	bytes, crdt       []byte, or a string in standard base64
//
// nil is NULL.
func rowValues(t *schema.Table, values map[string]any, patch bool) (vals []ssp2.Value, given ssp2.ColumnBitmap, rowID string, err error) {
	for name := range values {
		if _, ok := t.ColumnIndex(name); !ok {
			return nil, nil, "", &ValueError{Table: t.Name, Reason: fmt.Sprintf("unknown column %q", name)}
		}
	}
	vals = make([]ssp2.Value, len(t.Columns))
	given = ssp2.NewColumnBitmap(len(t.Columns))
	for i, col := range t.Columns {
		v, present := values[col.Name]
		if present {
			given.Set(i)
		}
		if !present && patch && i != t.PKIndex {
			continue
		}
		if !present || v == nil {
			if !col.Nullable {
				what := "missing"
				if present {
					what = "null"
				}
				return nil, nil, "", &ValueError{Table: t.Name, Column: col.Name, Type: col.Type, Reason: what + " value for a non-nullable column"}
			}
			vals[i].Null = true
			continue
		}
		if vals[i], err = toValue(col.Type, v); err != nil {
			return nil, nil, "", &ValueError{Table: t.Name, Column: col.Name, Type: col.Type, Value: v, Reason: err.Error()}
		}
	}
	rowID, err = t.RowID(vals)
	if err != nil {
		return nil, nil, "", fmt.Errorf("encode %s row: %w", t.Name, err)
	}
	if !patch {
		given = ssp2.FullColumnBitmap(len(t.Columns))
	}
	return vals, given, rowID, nil
}

// encodeRow encodes a full row given by column name (see rowValues) with
// the table's row codec and returns it with its rowId.
func encodeRow(t *schema.Table, values map[string]any) (payload []byte, rowID string, err error) {
	vals, _, rowID, err := rowValues(t, values, false)
	if err != nil {
		return nil, "", err
	}
	if payload, err = t.Codec.AppendRow(nil, vals); err != nil {
		return nil, "", fmt.Errorf("encode %s row: %w", t.Name, err)
	}
	return payload, rowID, nil
}

// toValue converts one non-nil value for a column of type typ.
func toValue(typ ssp2.ColumnType, v any) (ssp2.Value, error) {
	switch typ {
	case ssp2.TypeString:
		if s, ok := v.(string); ok {
			return ssp2.Value{Bytes: []byte(s)}, nil
		}
	case ssp2.TypeInteger:
		n, err := toInt(v)
		if err != nil {
			return ssp2.Value{}, err
		}
		return ssp2.Value{Int: n}, nil
	case ssp2.TypeFloat:
		f, err := toFloat(v)
		if err != nil {
			return ssp2.Value{}, err
		}
		return ssp2.Value{Float: f}, nil
	case ssp2.TypeBoolean:
		if b, ok := v.(bool); ok {
			return ssp2.Value{Bool: b}, nil
		}
	case ssp2.TypeJSON:
		b, err := toJSON(v, false)
		return ssp2.Value{Bytes: b}, err
	case ssp2.TypeBlobRef:
		b, err := toJSON(v, true)
		return ssp2.Value{Bytes: b}, err
	case ssp2.TypeBytes, ssp2.TypeCrdt:
		switch x := v.(type) {
		case []byte:
			return ssp2.Value{Bytes: x}, nil
		case string:
			b, err := base64.StdEncoding.DecodeString(x)
			if err != nil {
				return ssp2.Value{}, fmt.Errorf("string is not standard base64: %w", err)
			}
			return ssp2.Value{Bytes: b}, nil
		}
	}
	return ssp2.Value{}, fmt.Errorf("cannot use %T as %s", v, typ)
}

func toInt(v any) (int64, error) {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case uint:
		if uint64(x) > ssp2.MaxSafeInt {
			return 0, fmt.Errorf("%d is outside ±(2^53−1)", x)
		}
		n = int64(x)
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case uint64:
		if x > ssp2.MaxSafeInt {
			return 0, fmt.Errorf("%d is outside ±(2^53−1)", x)
		}
		n = int64(x)
	case float32:
		return toInt(float64(x))
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > ssp2.MaxSafeInt {
			return 0, fmt.Errorf("%v is not a safe integer", x)
		}
		n = int64(x)
	case json.Number:
		i, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s is not an integer", x)
		}
		n = i
	default:
		return 0, fmt.Errorf("cannot use %T as integer", v)
	}
	if n > ssp2.MaxSafeInt || n < -ssp2.MaxSafeInt {
		return 0, fmt.Errorf("%d is outside ±(2^53−1)", n)
	}
	return n, nil
}

func toFloat(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case float32:
		return float64(x), nil
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return 0, fmt.Errorf("%s is not a number", x)
		}
		return f, nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		n, err := toInt(x)
		return float64(n), err
	}
	return 0, fmt.Errorf("cannot use %T as float", v)
}

// toJSON returns the JSON text of v: raw JSON as given (validated), a
// string as JSON text only for blob_ref (whose value is a JSON document in
// a string), anything else marshalled.
func toJSON(v any, stringIsJSON bool) ([]byte, error) {
	switch x := v.(type) {
	case json.RawMessage:
		if !json.Valid(x) {
			return nil, fmt.Errorf("json.RawMessage is not valid JSON")
		}
		return x, nil
	case string:
		if stringIsJSON {
			if !json.Valid([]byte(x)) {
				return nil, fmt.Errorf("string is not a JSON document")
			}
			return []byte(x), nil
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", v, err)
	}
	return b, nil
}

// fromValue is the Go form of a decoded value; Bytes is copied.
func fromValue(typ ssp2.ColumnType, v ssp2.Value) any {
	if v.Null {
		return nil
	}
	switch typ {
	case ssp2.TypeString:
		return string(v.Bytes)
	case ssp2.TypeInteger:
		return v.Int
	case ssp2.TypeFloat:
		return v.Float
	case ssp2.TypeBoolean:
		return v.Bool
	case ssp2.TypeJSON, ssp2.TypeBlobRef:
		return json.RawMessage(append([]byte(nil), v.Bytes...))
	}
	return append([]byte(nil), v.Bytes...)
}

// decodeValues decodes a row into a map by column name.
func decodeValues(t *schema.Table, row []byte) (map[string]any, error) {
	vals, err := t.Codec.DecodeRow(row, nil)
	if err != nil {
		return nil, fmt.Errorf("decode %s row: %w", t.Name, err)
	}
	out := make(map[string]any, len(vals))
	for i, col := range t.Columns {
		out[col.Name] = fromValue(col.Type, vals[i])
	}
	return out, nil
}

// scopesMatch reports whether a row's scope columns match effective scopes
// by the purge rule of SPEC.md §3.3: for every effective key, the row's
// value is in the key's list. ok is false when a key has no scope column
// in the table (the fail-closed case: nothing may be cleared).
type scopeMatcher struct {
	cols  []int // column index per key
	types []ssp2.ColumnType
	sets  []map[string]bool
}

func newScopeMatcher(t *schema.Table, eff map[string][]string) (*scopeMatcher, bool) {
	m := &scopeMatcher{}
	keys := make([]string, 0, len(eff))
	for k := range eff {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		sc, ok := t.Scope(k)
		if !ok {
			return nil, false
		}
		set := make(map[string]bool, len(eff[k]))
		for _, v := range eff[k] {
			set[v] = true
		}
		m.cols = append(m.cols, sc.ColumnIndex)
		m.types = append(m.types, t.Columns[sc.ColumnIndex].Type)
		m.sets = append(m.sets, set)
	}
	return m, len(keys) > 0
}

// covered reports whether present holds every scope column the matcher
// reads.
func (m *scopeMatcher) covered(present ssp2.ColumnBitmap) bool {
	for _, c := range m.cols {
		if !present.Has(c) {
			return false
		}
	}
	return true
}

func (m *scopeMatcher) match(vals []ssp2.Value) bool {
	for i, c := range m.cols {
		s, ok := schema.RenderValue(m.types[i], vals[c])
		if !ok || !m.sets[i][s] {
			return false
		}
	}
	return true
}
