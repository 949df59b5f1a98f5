package loadgen

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/syncnode/syncnode/client"
	"github.com/syncnode/syncnode/loadfix"
	"github.com/syncnode/syncnode/ssp2"
)

// httpTarget is the server under load as the HTTP binding sees it: the
// sync and segment routes, the /__load control routes, and the headers
// every request carries.
type httpTarget struct {
	base    *url.URL
	syncURL string
	hc      *http.Client // bounded by the round timeout
	header  http.Header
	fetch   bool
}

// maxErrorBody bounds how much of a non-200 body is read.
const maxErrorBody = 64 << 10

func newHTTPTarget(rawURL string, header http.Header, timeout time.Duration, conns int, fetch bool) (*httpTarget, error) {
	u, err := url.Parse(strings.TrimRight(rawURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q is not an http(s) URL", rawURL)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = max(conns, 100)
	tr.MaxIdleConnsPerHost = max(conns, 100)
	return &httpTarget{
		base: u, syncURL: u.JoinPath("sync").String(),
		hc:     &http.Client{Transport: tr, Timeout: timeout},
		header: header, fetch: fetch,
	}, nil
}

// close drops the idle connections.
func (t *httpTarget) close() { t.hc.CloseIdleConnections() }

func (t *httpTarget) newRequest(ctx context.Context, method, u string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range t.header {
		req.Header[k] = vs
	}
	return req, nil
}

// roundTrip posts one request to /sync. The body is copied: net/http may
// still be reading a request body after the response arrived, so the
// client's encode buffer cannot be handed to it.
func (t *httpTarget) roundTrip(ctx context.Context, body []byte) (io.Reader, func(), error) {
	req, err := t.newRequest(ctx, http.MethodPost, t.syncURL, bytes.NewReader(bytes.Clone(body)))
	if err != nil {
		return nil, nil, fmt.Errorf("POST /sync: %w", err)
	}
	req.Header.Set("Content-Type", client.ContentType)
	req.Header.Set("Accept", client.ContentType)
	req.Header.Set("Accept-Encoding", acceptEncoding)
	resp, err := t.hc.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("POST /sync: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, nil, statusError("POST /sync", resp)
	}
	rc, err := client.DecodedBody(resp)
	if err != nil {
		return nil, nil, fmt.Errorf("POST /sync: %w", err)
	}
	return rc, func() { rc.Close() }, nil
}

// acceptEncoding is what browsers and the Go client offer; a server that
// compresses pays for it, the tool pays the (cheaper) zstd decoding.
const acceptEncoding = "zstd, gzip"

// statusError describes a non-200 answer, with the SSP2 error code when
// the body is the JSON error shape.
func statusError(what string, resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && (e.Code != "" || e.Error != "") {
		if e.Code == "" {
			return fmt.Errorf("%s: HTTP %d: %s", what, resp.StatusCode, e.Error)
		}
		return fmt.Errorf("%s: HTTP %d %s: %s", what, resp.StatusCode, e.Code, e.Message)
	}
	return fmt.Errorf("%s: HTTP %d: %.200s", what, resp.StatusCode, bytes.TrimSpace(raw))
}

// acquireEpoch runs the epoch-acquisition round of wire version 2 (a
// request without logEpoch, answered by a header-only response) and
// returns the partition's log epoch.
func (t *httpTarget) acquireEpoch(ctx context.Context, clientID string) (string, error) {
	msg := ssp2.Message{WireVersion: wireVersion, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: clientID, SchemaVersion: fixtureSchema.Version},
		&ssp2.PullHeader{Accept: acceptRows},
	}}
	body, err := msg.AppendEncode(nil)
	if err != nil {
		return "", fmt.Errorf("acquire epoch: %w", err)
	}
	rd, release, err := t.roundTrip(ctx, body)
	if err != nil {
		return "", fmt.Errorf("acquire epoch: %w", err)
	}
	defer release()
	mr, err := ssp2.NewMessageReader(rd)
	if err != nil {
		return "", fmt.Errorf("acquire epoch: %w", err)
	}
	for {
		f, err := mr.Next()
		if errors.Is(err, io.EOF) {
			return "", errors.New("acquire epoch: the response has no RESP_HEADER")
		}
		if err != nil {
			return "", fmt.Errorf("acquire epoch: %w", err)
		}
		switch f := f.(type) {
		case *ssp2.RespHeader:
			if f.RequiredSchemaVersion != nil {
				return "", fmt.Errorf("acquire epoch: the server requires schema version %d; the load fixture is version %d (is it serving the load fixture's schema?)", *f.RequiredSchemaVersion, fixtureSchema.Version)
			}
			return f.LogEpoch, nil
		case *ssp2.ErrorFrame:
			return "", fmt.Errorf("acquire epoch: in-band ERROR %s: %s", f.Code, f.Message)
		}
	}
}

// fetchSegments downloads referenced segments through GET /segments/{id}
// with their subscription's requested scopes, checking each body's length
// and content address as a client must before applying it.
func (t *httpTarget) fetchSegments(ctx context.Context, refs []ssp2.SegmentRef, subs []*subState) error {
	if !t.fetch {
		return nil
	}
	var h hash.Hash
	for i := range refs {
		ref := &refs[i]
		req, err := t.newRequest(ctx, http.MethodGet, t.base.JoinPath("segments", ref.SegmentID).String(), nil)
		if err != nil {
			return fmt.Errorf("download segment: %w", err)
		}
		req.Header.Set("X-Syncular-Scopes", subs[i].scopes)
		req.Header.Set("Accept-Encoding", acceptEncoding)
		resp, err := t.hc.Do(req)
		if err != nil {
			return fmt.Errorf("download segment: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			err := statusError("download segment "+ref.SegmentID, resp)
			resp.Body.Close()
			return err
		}
		if h == nil {
			h = sha256.New()
		} else {
			h.Reset()
		}
		body, err := client.DecodedBody(resp)
		if err != nil {
			resp.Body.Close()
			return fmt.Errorf("download segment %s: %w", ref.SegmentID, err)
		}
		n, err := io.Copy(h, io.LimitReader(body, ref.ByteLength+1))
		body.Close()
		if err != nil {
			return fmt.Errorf("download segment %s: %w", ref.SegmentID, err)
		}
		if n != ref.ByteLength {
			return fmt.Errorf("download segment %s: %d bytes, the descriptor says %d", ref.SegmentID, n, ref.ByteLength)
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != ref.SegmentID {
			return fmt.Errorf("download segment %s: content address mismatch (got %s)", ref.SegmentID, got)
		}
	}
	return nil
}

// ServerMetrics is a load fixture's GET /__load/metrics. HasCPU is false
// for a server that does not report cpuSeconds (Syncular's own load
// server does not).
type ServerMetrics struct {
	loadfix.Metrics
	HasCPU bool `json:"hasCpu"`
}

// errNoRoute: the server answered a /__load route with 404.
var errNoRoute = errors.New("route not found")

// control calls a /__load route; out may be nil. A 404 is errNoRoute.
func (t *httpTarget) control(ctx context.Context, method, route string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := t.newRequest(ctx, method, t.base.JoinPath("__load", route).String(), body)
	if err != nil {
		return fmt.Errorf("%s /__load/%s: %w", method, route, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	// Seeding a large dataset takes longer than a round.
	hc := *t.hc
	hc.Timeout = 10 * time.Minute
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s /__load/%s: %w", method, route, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%s /__load/%s: %w", method, route, errNoRoute)
	}
	if resp.StatusCode != http.StatusOK {
		return statusError(method+" /__load/"+route, resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s /__load/%s: %w", method, route, err)
	}
	return nil
}

func (t *httpTarget) metrics(ctx context.Context) (ServerMetrics, error) {
	var raw json.RawMessage
	if err := t.control(ctx, http.MethodGet, "metrics", nil, &raw); err != nil {
		return ServerMetrics{}, err
	}
	var m ServerMetrics
	var cpu struct {
		CPUSeconds *float64 `json:"cpuSeconds"`
	}
	if err := json.Unmarshal(raw, &m.Metrics); err != nil {
		return m, fmt.Errorf("GET /__load/metrics: %w", err)
	}
	_ = json.Unmarshal(raw, &cpu)
	m.HasCPU = cpu.CPUSeconds != nil
	return m, nil
}

func (t *httpTarget) reset(ctx context.Context, seedRows int) error {
	return t.control(ctx, http.MethodPost, "reset", map[string]int{"seedRows": seedRows}, nil)
}

func (t *httpTarget) prune(ctx context.Context) error {
	return t.control(ctx, http.MethodPost, "prune", nil, nil)
}
