package bus

import (
	"strings"
	"testing"
)

func TestSegmentNames(t *testing.T) {
	t.Parallel()
	ns, err := NewNames("t-1_x")
	if err != nil {
		t.Fatal(err)
	}
	b := ns.SegmentsBucket()
	hex := strings.Repeat("ab", 32)
	if got := SegmentObject(hex); got != "sha256-"+hex {
		t.Errorf("SegmentObject = %q", got)
	}
	if got := SegmentUploadKey(b, hex); got != "upload.t-1_x_sync_segments."+hex {
		t.Errorf("SegmentUploadKey = %q", got)
	}
	if got := ObjectStream(b); got != "OBJ_t-1_x_sync_segments" {
		t.Errorf("ObjectStream = %q", got)
	}
	if got := ObjectChunks(b); got != "$O.t-1_x_sync_segments.C.>" {
		t.Errorf("ObjectChunks = %q", got)
	}
	subj := ObjectChunkSubject(b, "NUID1")
	if nuid, ok := ParseObjectChunkSubject(b, subj); !ok || nuid != "NUID1" {
		t.Errorf("ParseObjectChunkSubject(%q) = %q, %v", subj, nuid, ok)
	}
	for _, bad := range []string{"$O.t-1_x_sync_segments.C.", "$O.other.C.x", "$O.t-1_x_sync_segments.M.x"} {
		if _, ok := ParseObjectChunkSubject(b, bad); ok {
			t.Errorf("ParseObjectChunkSubject(%q) accepted", bad)
		}
	}
	// The Object Store encodes names with padded base64url.
	if got := ObjectMetaSubject("b", "ab"); got != "$O.b.M.YWI=" {
		t.Errorf("ObjectMetaSubject = %q", got)
	}
}
