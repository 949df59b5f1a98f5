package segments_test

import (
	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/httpapi"
	"github.com/syncnode/syncnode/segments"
)

// The engine and the HTTP layer use *Store through narrow interfaces of
// their own; this keeps it satisfying them.
var (
	_ engine.SegmentStore   = (*segments.Store)(nil)
	_ httpapi.SegmentSource = (*segments.Store)(nil)
)
