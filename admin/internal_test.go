package admin

import (
	"errors"
	"testing"
)

func TestServiceVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"1.2.3": "1.2.3", "v1.2.3": "1.2.3", "v0.0.0-20260101120000-abcdef123456": "0.0.0-20260101120000-abcdef123456",
		"devel": "0.0.0-devel", "": "0.0.0", "(devel)": "0.0.0-devel", "1.2": "0.0.0-1.2", "a..b": "0.0.0", "💥": "0.0.0",
	} {
		got := serviceVersion(in)
		if got != want || !semver.MatchString(got) {
			t.Errorf("serviceVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzDecodeRequest: any request body decodes into every request type or
// is refused with admin.invalid_request, never a panic.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"partition":"p"}`, `{"after":"x","limit":5}`, `{"sources":["a"],"watermark":1}`, `[`, `{"bogus":1}`, `{} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, v := range []any{&Empty{}, &PartitionsRequest{}, &PartitionRequest{}, &ClientsRequest{}, &PruneRequest{},
			&CheckpointsRequest{}, &DeclareRequest{}, &ActivateRequest{}, &SegmentPruneRequest{}} {
			err := decodeStrict(b, v)
			var ae *Error
			if err != nil && (!errors.As(err, &ae) || ae.Code != CodeInvalidRequest) {
				t.Fatalf("decode %q into %T: %v", b, v, err)
			}
		}
	})
}
