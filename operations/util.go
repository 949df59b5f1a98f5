package operations

import (
	"bytes"
	"iter"
	"maps"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func mapsKeys[V any](m map[string]V) iter.Seq[string] { return maps.Keys(m) }
