package operations

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The tagged value encoding of REMOTE.md §4. A decoded value is nil,
// bool, float64 (number), string, int64 (integer), []byte, []any (array)
// or Object.

// Object is an object value: its fields in order, keys unique.
type Object []Field

// Field is one key of an Object.
type Field struct {
	Key   string
	Value any
}

// Get returns the value of key.
func (o Object) Get(key string) (any, bool) {
	for _, f := range o {
		if f.Key == key {
			return f.Value, true
		}
	}
	return nil, false
}

// maxDepth bounds nesting so a hostile message cannot exhaust the stack.
const maxDepth = 64

type tagged struct {
	T string          `json:"t"`
	V json.RawMessage `json:"v"`
}

// Decode decodes one tagged value.
func Decode(b []byte) (any, error) {
	return decode(b, 0)
}

func decode(b []byte, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("value nested too deeply")
	}
	var tv tagged
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tv); err != nil {
		return nil, fmt.Errorf("tagged value: %w", err)
	}
	if dec.More() {
		return nil, errors.New("tagged value: trailing data")
	}
	hasV := len(tv.V) > 0
	need := func(dst any) error {
		if !hasV {
			return fmt.Errorf("tagged %s value without v", tv.T)
		}
		if err := json.Unmarshal(tv.V, dst); err != nil {
			return fmt.Errorf("tagged %s value: %w", tv.T, err)
		}
		return nil
	}
	switch tv.T {
	case "null":
		if hasV {
			return nil, errors.New("tagged null value with v")
		}
		return nil, nil
	case "boolean":
		if string(tv.V) != "true" && string(tv.V) != "false" {
			return nil, errors.New("tagged boolean value: v is not a boolean")
		}
		return string(tv.V) == "true", nil
	case "number":
		var x float64
		if err := need(&x); err != nil {
			return nil, err
		}
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, errors.New("tagged number value is not finite")
		}
		return x, nil
	case "string":
		var x string
		if len(tv.V) == 0 || tv.V[0] != '"' {
			return nil, errors.New("tagged string value: v is not a string")
		}
		if err := need(&x); err != nil {
			return nil, err
		}
		return x, nil
	case "integer":
		var s string
		if len(tv.V) == 0 || tv.V[0] != '"' {
			return nil, errors.New("tagged integer value: v is not a string")
		}
		if err := need(&s); err != nil {
			return nil, err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != s {
			return nil, fmt.Errorf("tagged integer value %q is not a canonical signed 64-bit decimal", s)
		}
		return n, nil
	case "bytes":
		var s string
		if len(tv.V) == 0 || tv.V[0] != '"' {
			return nil, errors.New("tagged bytes value: v is not a string")
		}
		if err := need(&s); err != nil {
			return nil, err
		}
		out, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil || base64.StdEncoding.EncodeToString(out) != s {
			return nil, errors.New("tagged bytes value is not canonical padded base64")
		}
		return out, nil
	case "array":
		var items []json.RawMessage
		if len(tv.V) == 0 || tv.V[0] != '[' {
			return nil, errors.New("tagged array value: v is not an array")
		}
		if err := need(&items); err != nil {
			return nil, err
		}
		out := make([]any, len(items))
		for i, it := range items {
			v, err := decode(it, depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = v
		}
		return out, nil
	case "object":
		var pairs []json.RawMessage
		if len(tv.V) == 0 || tv.V[0] != '[' {
			return nil, errors.New("tagged object value: v is not an array")
		}
		if err := need(&pairs); err != nil {
			return nil, err
		}
		out := make(Object, 0, len(pairs))
		seen := make(map[string]bool, len(pairs))
		for i, p := range pairs {
			var kv []json.RawMessage
			if err := json.Unmarshal(p, &kv); err != nil || len(kv) != 2 {
				return nil, fmt.Errorf("object entry %d is not a [key, value] pair", i)
			}
			var k string
			if len(kv[0]) == 0 || kv[0][0] != '"' || json.Unmarshal(kv[0], &k) != nil {
				return nil, fmt.Errorf("object entry %d: the key is not a string", i)
			}
			if seen[k] {
				return nil, fmt.Errorf("object key %q repeated", k)
			}
			seen[k] = true
			v, err := decode(kv[1], depth+1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out = append(out, Field{Key: k, Value: v})
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown value tag %q", tv.T)
}

// Encode encodes v. Besides the decoded forms it takes int, int32,
// map[string]any (keys sorted) and []map[string]any for convenience.
func Encode(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := encode(&b, v, 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func encode(b *bytes.Buffer, v any, depth int) error {
	if depth > maxDepth {
		return errors.New("value nested too deeply")
	}
	str := func(s string) {
		q, _ := json.Marshal(s)
		b.Write(q)
	}
	switch x := v.(type) {
	case nil:
		b.WriteString(`{"t":"null"}`)
	case bool:
		b.WriteString(`{"t":"boolean","v":` + strconv.FormatBool(x) + `}`)
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return errors.New("a number must be finite")
		}
		b.WriteString(`{"t":"number","v":` + strconv.FormatFloat(x, 'g', -1, 64) + `}`)
	case string:
		b.WriteString(`{"t":"string","v":`)
		str(x)
		b.WriteByte('}')
	case int64:
		b.WriteString(`{"t":"integer","v":"` + strconv.FormatInt(x, 10) + `"}`)
	case int:
		return encode(b, int64(x), depth)
	case int32:
		return encode(b, int64(x), depth)
	case []byte:
		b.WriteString(`{"t":"bytes","v":"` + base64.StdEncoding.EncodeToString(x) + `"}`)
	case json.RawMessage:
		return encode(b, string(x), depth)
	case []any:
		b.WriteString(`{"t":"array","v":[`)
		for i, it := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := encode(b, it, depth+1); err != nil {
				return err
			}
		}
		b.WriteString(`]}`)
	case Object:
		b.WriteString(`{"t":"object","v":[`)
		for i, f := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('[')
			str(f.Key)
			b.WriteByte(',')
			if err := encode(b, f.Value, depth+1); err != nil {
				return err
			}
			b.WriteByte(']')
		}
		b.WriteString(`]}`)
	default:
		return fmt.Errorf("cannot encode a %T value", v)
	}
	return nil
}

// FromJSON converts plain JSON (the CLI's --params) to values: numbers
// that are integers become integers, others numbers; objects keep their
// key order.
func FromJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := fromJSON(dec, 0)
	if err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func fromJSON(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("value nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			out := []any{}
			for dec.More() {
				v, err := fromJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		case '{':
			out := Object{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := fromJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, Field{Key: kt.(string), Value: v})
			}
			_, err := dec.Token()
			return out, err
		}
	case json.Number:
		if n, err := strconv.ParseInt(t.String(), 10, 64); err == nil {
			return n, nil
		}
		return t.Float64()
	case nil, bool, string:
		return t, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// ToJSONOrdered is ToJSON keeping object keys in their order (for
// printing).
func ToJSONOrdered(v any) any {
	switch x := v.(type) {
	case Object:
		return orderedJSON(x)
	case []any:
		out := make([]any, len(x))
		for i, it := range x {
			out[i] = ToJSONOrdered(it)
		}
		return out
	}
	return ToJSON(v)
}

// orderedJSON marshals an Object with its keys in order.
type orderedJSON Object

func (o orderedJSON) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.Key)
		v, err := json.Marshal(ToJSONOrdered(f.Value))
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// ToJSON renders a value as plain JSON (integers as numbers, bytes as
// base64 strings) for people and scripts.
func ToJSON(v any) any {
	switch x := v.(type) {
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case []any:
		out := make([]any, len(x))
		for i, it := range x {
			out[i] = ToJSON(it)
		}
		return out
	case Object:
		out := make(map[string]any, len(x))
		for _, f := range x {
			out[f.Key] = ToJSON(f.Value)
		}
		return out
	}
	return v
}
