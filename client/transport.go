package client

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/syncnode/syncnode/ssp2"
)

// ContentType is the media type of SSP2 request and response bodies.
const ContentType = "application/vnd.syncular.sync.v2"

// maxErrorBody bounds how much of a non-200 body is read.
const maxErrorBody = 64 << 10

// defaultTransport is shared by clients without an HTTPClient: load tests
// run many clients against one host, so keep enough idle connections.
var defaultTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	return t
}()

var defaultHTTPClient = &http.Client{Transport: defaultTransport}

// token returns the bearer token for the next request.
func (c *Client) token(ctx context.Context) (string, error) {
	if c.cfg.TokenFunc != nil {
		t, err := c.cfg.TokenFunc(ctx)
		if err != nil {
			return "", fmt.Errorf("token: %w", err)
		}
		return t, nil
	}
	return c.cfg.Token, nil
}

// post sends one SSP2 request and returns the decoded response body. A
// non-200 answer is an *Error.
func (c *Client) post(ctx context.Context, body []byte) (io.ReadCloser, error) {
	tok, err := c.token(ctx)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.syncURL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("Accept", ContentType)
	if c.cfg.AcceptEncoding != "" {
		req.Header.Set("Accept-Encoding", c.cfg.AcceptEncoding)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, httpError("sync", resp.StatusCode, b)
	}
	return DecodedBody(resp)
}

// download fetches one segment and verifies its content address and
// length before returning it (SPEC.md §5.1). A descriptor with a signed
// url is fetched from that url alone, with no credential attached, and
// never at or after its expiry (§5.4); any other through GET
// /segments/{id} with the subscription's requested scopes (§5.5).
func (c *Client) download(ctx context.Context, ref *ssp2.SegmentRef, requested map[string][]string) ([]byte, error) {
	var req *http.Request
	if ref.URL != nil {
		if c.cfg.NowFunc().UnixMilli() >= *ref.URLExpiresAtMs {
			return nil, &Error{Op: "download segment", Code: ssp2.CodeSegmentExpired, Message: "the signed url expired before the fetch"}
		}
		u, err := c.baseURL.Parse(*ref.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, ssp2.Errorf(ssp2.CodeInvalidRequest, "SEGMENT_REF url %q is not an http(s) URL", *ref.URL)
		}
		if req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil); err != nil {
			return nil, fmt.Errorf("download segment: %w", err)
		}
	} else {
		tok, err := c.token(ctx)
		if err != nil {
			return nil, err
		}
		u := c.baseURL.JoinPath("segments", ref.SegmentID)
		if req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil); err != nil {
			return nil, fmt.Errorf("download segment: %w", err)
		}
		req.Header.Set("X-Syncular-Scopes", string(ssp2.CanonicalScopes(requested)))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	req.Header.Set("Accept-Encoding", c.cfg.SegmentAcceptEncoding)
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("download segment: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, httpError("download segment", resp.StatusCode, b)
	}
	body, err := DecodedBody(resp)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	// byteLength is the uncompressed size: it sizes the buffer and caps
	// the read, so a lying server cannot make the client buffer more.
	if ref.ByteLength < 0 || ref.ByteLength > maxSegmentBytes {
		return nil, fmt.Errorf("download segment: byteLength %d out of range", ref.ByteLength)
	}
	// The bytes are read into a buffer of exactly that size and hashed as
	// they arrive, in the same pass that stores them, while the rest is
	// still in flight; one byte more is an error.
	data := make([]byte, ref.ByteLength)
	h := sha256.New()
	n, err := io.ReadFull(io.TeeReader(body, h), data)
	if err == nil {
		var extra [1]byte
		if m, _ := io.ReadFull(body, extra[:]); m > 0 {
			return nil, fmt.Errorf("download segment %s: more bytes than the descriptor's %d", ref.SegmentID, ref.ByteLength)
		}
	} else if err == io.ErrUnexpectedEOF || err == io.EOF {
		return nil, fmt.Errorf("download segment %s: got %d bytes, descriptor says %d", ref.SegmentID, n, ref.ByteLength)
	} else {
		return nil, fmt.Errorf("download segment: %w", err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != ref.SegmentID {
		return nil, fmt.Errorf("download segment %s: content address mismatch (got %s)", ref.SegmentID, got)
	}
	return data, nil
}

// maxSegmentBytes bounds one downloaded segment (a 50 000-row page of wide
// rows stays far below it).
const maxSegmentBytes = 1 << 30

// maxDrain bounds how much of an unread body Close reads so the
// connection can be reused; past it the connection is dropped instead.
const maxDrain = 64 << 10

// drainingBody reads what is left of a body (the end of a compressed
// stream, the last chunk) before closing it, so the HTTP client can reuse
// the connection.
type drainingBody struct{ io.ReadCloser }

func (b drainingBody) Close() error {
	_, _ = io.CopyN(io.Discard, b.ReadCloser, maxDrain)
	return b.ReadCloser.Close()
}

// DecodedBody undoes the response's Content-Encoding: zstd, gzip or
// identity, what this client accepts. Closing the result drains and
// closes the response body.
func DecodedBody(resp *http.Response) (io.ReadCloser, error) {
	resp.Body = drainingBody{resp.Body}
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return resp.Body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("gzip response: %w", err)
		}
		return &decodedReader{r: zr, body: resp.Body, close: zr.Close}, nil
	case "zstd":
		d := zstdPool.Get().(*zstd.Decoder)
		if err := d.Reset(resp.Body); err != nil {
			zstdPool.Put(d)
			resp.Body.Close()
			return nil, fmt.Errorf("zstd response: %w", err)
		}
		return &decodedReader{r: d, body: resp.Body, close: func() error {
			_ = d.Reset(nil)
			zstdPool.Put(d)
			return nil
		}}, nil
	default:
		resp.Body.Close()
		return nil, fmt.Errorf("response has unsupported Content-Encoding %q", enc)
	}
}

var zstdPool = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(false))
	if err != nil {
		panic(err) // only invalid options fail
	}
	return d
}}

// decodedReader reads a decompressed body and closes both layers.
type decodedReader struct {
	r     io.Reader
	body  io.ReadCloser
	close func() error
	once  sync.Once
}

func (d *decodedReader) Read(p []byte) (int, error) { return d.r.Read(p) }

func (d *decodedReader) Close() error {
	var err error
	d.once.Do(func() {
		err = d.close()
		if cerr := d.body.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

// parseBaseURL checks and normalizes Config.BaseURL.
func parseBaseURL(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(s, "/"))
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http(s) URL", s)
	}
	return u, nil
}
