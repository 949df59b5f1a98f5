package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Column versions (SPEC.md §2.2): every stored column carries the row's
// server version at the column's last write. They are server-internal and
// live in the _sync_column_versions blob of a row, in the spec's reference
// relational layout: (ordinal, version) pairs of LEB128 unsigned varints,
// ascending by ordinal, for the columns whose version exceeds 1. A NULL
// blob means every column is at the row's current server version — a row
// written before column versions existed, or one whose last write wrote
// every column (an insert, a full-row write), which is the common case and
// costs no blob at all.

// ErrColumnVersions is returned by DecodeColumnVersions for a blob that is
// not a well-formed encoding for its row.
var ErrColumnVersions = errors.New("malformed column versions")

// DecodeColumnVersions decodes blob into dst, one version per column (len
// dst is the column count), for a row at serverVersion. A nil blob sets
// every column to serverVersion. A malformed blob — a truncated varint, an
// ordinal out of range or not ascending, a version below 2 or above
// serverVersion — returns an error wrapping ErrColumnVersions.
func DecodeColumnVersions(blob []byte, serverVersion int64, dst []int64) error {
	if blob == nil {
		for i := range dst {
			dst[i] = serverVersion
		}
		return nil
	}
	for i := range dst {
		dst[i] = 1
	}
	next := uint64(0) // the lowest ordinal the next pair may name
	for len(blob) > 0 {
		ord, n := binary.Uvarint(blob)
		if n <= 0 {
			return fmt.Errorf("%w: truncated ordinal", ErrColumnVersions)
		}
		blob = blob[n:]
		ver, n := binary.Uvarint(blob)
		if n <= 0 {
			return fmt.Errorf("%w: truncated version", ErrColumnVersions)
		}
		blob = blob[n:]
		switch {
		case ord < next || ord >= uint64(len(dst)):
			return fmt.Errorf("%w: ordinal %d out of order or beyond %d columns", ErrColumnVersions, ord, len(dst))
		case ver < 2 || ver > uint64(serverVersion):
			return fmt.Errorf("%w: column %d at version %d of a row at %d", ErrColumnVersions, ord, ver, serverVersion)
		}
		dst[ord] = int64(ver)
		next = ord + 1
	}
	return nil
}

// AppendColumnVersions encodes versions (one per column) of a row at
// serverVersion, appending to dst. It returns nil — stored as NULL — when
// every column but skip (the primary key, whose version never matters) is
// at serverVersion; otherwise a non-empty blob. When no other column is
// above version 1 the blob names skip at serverVersion, since an empty
// blob reads back as NULL from SQLite.
func AppendColumnVersions(dst []byte, versions []int64, serverVersion int64, skip int) []byte {
	all := true
	for i, v := range versions {
		if i != skip && v != serverVersion {
			all = false
			break
		}
	}
	if all {
		return nil
	}
	start := len(dst)
	for i, v := range versions {
		if v > 1 && i != skip {
			dst = binary.AppendUvarint(dst, uint64(i))
			dst = binary.AppendUvarint(dst, uint64(v))
		}
	}
	if len(dst) == start {
		dst = binary.AppendUvarint(dst, uint64(skip))
		dst = binary.AppendUvarint(dst, uint64(serverVersion))
	}
	return dst
}
