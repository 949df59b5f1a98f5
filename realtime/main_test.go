package realtime_test

import (
	"net/http"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// httpClient keeps no idle connections, so a finished test leaves no
// goroutine behind.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
