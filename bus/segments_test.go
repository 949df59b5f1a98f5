package bus

import (
	"errors"
	"strings"
	"testing"
)

func TestSegmentNames(t *testing.T) {
	t.Parallel()
	if b, err := SegmentsBucket(""); err != nil || b != BucketSegments {
		t.Errorf("SegmentsBucket(\"\") = %q, %v", b, err)
	}
	b, err := SegmentsBucket("t-1_x")
	if err != nil || b != "sync_segments_t-1_x" {
		t.Errorf("SegmentsBucket(t-1_x) = %q, %v", b, err)
	}
	for _, bad := range []string{"a.b", "a b", "*", ">", "é", strings.Repeat("x", MaxInstanceLen+1)} {
		if _, err := SegmentsBucket(bad); !errors.Is(err, ErrInvalidInstance) {
			t.Errorf("SegmentsBucket(%q) = %v, want ErrInvalidInstance", bad, err)
		}
	}
	hex := strings.Repeat("ab", 32)
	if got := SegmentObject(hex); got != "sha256-"+hex {
		t.Errorf("SegmentObject = %q", got)
	}
	if got := SegmentUploadKey(b, hex); got != "upload.sync_segments_t-1_x."+hex {
		t.Errorf("SegmentUploadKey = %q", got)
	}
	if got := ObjectStream(b); got != "OBJ_sync_segments_t-1_x" {
		t.Errorf("ObjectStream = %q", got)
	}
	if got := ObjectChunks(b); got != "$O.sync_segments_t-1_x.C.>" {
		t.Errorf("ObjectChunks = %q", got)
	}
	subj := ObjectChunkSubject(b, "NUID1")
	if nuid, ok := ParseObjectChunkSubject(b, subj); !ok || nuid != "NUID1" {
		t.Errorf("ParseObjectChunkSubject(%q) = %q, %v", subj, nuid, ok)
	}
	for _, bad := range []string{"$O.sync_segments_t-1_x.C.", "$O.other.C.x", "$O.sync_segments_t-1_x.M.x"} {
		if _, ok := ParseObjectChunkSubject(b, bad); ok {
			t.Errorf("ParseObjectChunkSubject(%q) accepted", bad)
		}
	}
	// The Object Store encodes names with padded base64url.
	if got := ObjectMetaSubject("b", "ab"); got != "$O.b.M.YWI=" {
		t.Errorf("ObjectMetaSubject = %q", got)
	}
}
