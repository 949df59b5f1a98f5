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
