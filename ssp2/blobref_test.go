package ssp2

import "testing"

func TestBlobRefID(t *testing.T) {
	const id = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		ref  string
		want string
		ok   bool
	}{
		{`{"blobId":"` + id + `","byteLength":3}`, id, true},
		{`{"blobId":"` + id + `","byteLength":3,"mediaType":"image/png","name":"a.png"}`, id, true},
		{`{"byteLength":3,"blobId":"` + id + `"}`, "", false},
		{`{"blobId":"` + id + `"}`, "", false},
		{`nope`, "", false},
	} {
		got, ok := BlobRefID([]byte(c.ref))
		if got != c.want || ok != c.ok {
			t.Errorf("BlobRefID(%s) = %q, %v; want %q, %v", c.ref, got, ok, c.want, c.ok)
		}
	}
	if !ValidBlobID(id) || ValidBlobID(id[:len(id)-1]) || ValidBlobID("sha256:"+string(make([]byte, 64))) ||
		ValidBlobID("SHA256:"+id[7:]) {
		t.Error("ValidBlobID")
	}
}

// BlobRefID accepts exactly what the codec accepts as a blob_ref value,
// and the id it returns is a content address.
func FuzzBlobRefID(f *testing.F) {
	f.Add([]byte(`{"blobId":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","byteLength":3,"name":"a"}`))
	f.Add([]byte(`{"blobId":"sha256:`))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ok := BlobRefID(b)
		if ok != validBlobRef(b) {
			t.Fatalf("BlobRefID ok = %v, validBlobRef = %v", ok, !ok)
		}
		if ok && !ValidBlobID(id) {
			t.Fatalf("BlobRefID returned %q", id)
		}
	})
}
