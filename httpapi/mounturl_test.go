package httpapi

import (
	"net/http/httptest"
	"net/url"
	"testing"
)

// plainPath admits only request URIs that parsing gives back unchanged,
// so MountURL's shortcut answers what the parse would: every byte value,
// alone and between others, is checked against url.ParseRequestURI.
func TestPlainPathAgreesWithParse(t *testing.T) {
	admitted := 0
	for b := range 256 {
		for _, uri := range []string{"/" + string(rune(b)), "/i/a" + string([]byte{byte(b)}) + "b/sync", string([]byte{byte(b)}) + "/sync"} {
			if !plainPath(uri) {
				continue
			}
			admitted++
			u, err := url.ParseRequestURI(uri)
			if err != nil || u.EscapedPath() != uri {
				t.Errorf("plainPath(%q) but ParseRequestURI gives %v, %v", uri, u, err)
			}
		}
	}
	if admitted == 0 {
		t.Fatal("plainPath admitted nothing")
	}
	for _, uri := range []string{"", "*", "/sync?x=1", "/a%20b/sync", "http://h/sync", "/a b", "/a#b"} {
		if plainPath(uri) {
			t.Errorf("plainPath(%q) = true", uri)
		}
	}
}

// MountURL answers the mount of the path a request was sent to, escaped
// as sent, with or without the shortcut.
func TestMountURL(t *testing.T) {
	for uri, want := range map[string]string{
		"/sync":              "http://node/",
		"/i/abc/sync":        "http://node/i/abc/",
		"/i/a%2Fb/sync":      "http://node/i/a%2Fb/",
		"/i/a:b@c/sync?x=1":  "http://node/i/a:b@c/",
		"/i/%7Eu/sync":       "http://node/i/%7Eu/",
		"http://node/x/sync": "http://node/x/",
	} {
		r := httptest.NewRequest("POST", uri, nil)
		r.Host = "node"
		if got := MountURL(r, "sync"); got != want {
			t.Errorf("MountURL(%q) = %q, want %q", uri, got, want)
		}
	}
}
