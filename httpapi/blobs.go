package httpapi

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/syncnode/syncnode/engine"
	"github.com/syncnode/syncnode/signedurl"
	"github.com/syncnode/syncnode/ssp2"
	"github.com/syncnode/syncnode/storage"
)

// BlobSource stores and streams blob bytes (implemented by *blobs.Store).
type BlobSource interface {
	// Put stores an upload of the decoded body; existed reports a blob
	// the partition held already (nothing was read).
	Put(ctx context.Context, u storage.BlobUpload) (existed bool, err error)
	// Grant checks an upload grant request and reports whether the
	// partition holds the blob already.
	Grant(ctx context.Context, partition, blobID string, byteLength int64) (present bool, err error)
	// Open streams a blob's bytes, verified against its address.
	Open(ctx context.Context, b storage.Blob) (io.ReadCloser, error)
}

// maxMediaTypeLen bounds the advisory media type an upload may declare.
const maxMediaTypeLen = 255

// maxGrantBody bounds an upload grant request body.
const maxGrantBody = 4 << 10

func (h *Handler) routeBlobs() {
	h.mux.Handle("PUT /blobs/{id}", h.instrument("blob_upload", http.HandlerFunc(h.serveBlobUpload)))
	h.mux.Handle("POST /blobs/{id}/upload-grant", h.instrument("blob_grant", http.HandlerFunc(h.serveBlobGrant)))
	h.mux.Handle("GET /blobs/{id}", h.instrument("blob", http.HandlerFunc(h.serveBlob)))
}

var errNoBlobs = ssp2.Errorf(ssp2.CodeBlobNotFound, "this node keeps no blobs")

// serveBlobUpload is PUT /blobs/{id} (SPEC.md §5.9.3): 200 with an empty
// body once the decoded body, whose SHA-256 must be the id, is stored, or
// was already. With ?st= it is the presigned PUT of an upload grant: the
// token is the whole grant (no host authentication is read), and the body
// may not exceed the granted byteLength.
func (h *Handler) serveBlobUpload(w http.ResponseWriter, r *http.Request) {
	blobID := r.PathValue("id")
	u := storage.BlobUpload{BlobID: blobID, MediaType: uploadMediaType(r.Header.Get("Content-Type")), Declared: r.ContentLength}
	if r.URL.Query().Has(signedurl.Param) {
		if h.cfg.Blobs == nil {
			writeError(w, errNoBlobs)
			return
		}
		g, err := h.cfg.Engine.AuthorizeSignedBlobUpload(r.Context(), blobID, r.URL.Query().Get(signedurl.Param))
		if err != nil {
			h.writeBlobError(w, "signed blob upload authorization failed", err)
			return
		}
		u.Partition, u.Limit = g.Partition, &g.ByteLength
	} else {
		id, ok := h.admitUpload(w, r)
		if !ok {
			return
		}
		u.Partition = id.Partition
	}
	h.storeBlob(w, r, u)
}

// storeBlob streams an admitted upload's body into the blob store.
func (h *Handler) storeBlob(w http.ResponseWriter, r *http.Request, u storage.BlobUpload) {
	blobID := u.BlobID
	body := &uploadReader{r: r.Body, rc: http.NewResponseController(w), timeout: h.cfg.WriteTimeout}
	var src io.Reader = body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		u.Declared = -1 // the cap applies to the decoded bytes
		zr, err := gzip.NewReader(body)
		if err != nil {
			writeError(w, ssp2.Errorf(ssp2.CodeInvalidRequest, "request body is not valid gzip"))
			return
		}
		defer zr.Close()
		src = zr
	default:
		writeErrorStatus(w, http.StatusUnsupportedMediaType, ssp2.Errorf(ssp2.CodeInvalidRequest, "unsupported Content-Encoding %q", enc))
		return
	}
	u.Body = src
	_, err := h.cfg.Blobs.Put(r.Context(), u)
	switch {
	case err == nil:
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
	case r.Context().Err() != nil:
		h.log.Debug("client went away mid-upload", "blob", blobID, "err", err)
	case body.err != nil || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader):
		status, berr := bodyError(errors.Join(body.err, err), -1)
		writeErrorStatus(w, status, berr)
	case ssp2.CodeOf(err) == "":
		h.log.Error("store blob", "blob", blobID, "err", err)
		writeError(w, ssp2.Errorf(ssp2.CodeInternalError, "internal error"))
	default:
		writeError(w, err)
	}
}

// serveBlobGrant is POST /blobs/{id}/upload-grant (SPEC.md §5.9.3): the
// size cap is checked against the declared byteLength; {"present":true}
// when the blob is held already; else, when blobs are presigned,
// {"url","urlExpiresAtMs"}: a PUT of at most byteLength bytes to
// <mount>/blobs/{id}?st=… that needs no host authentication, and without
// presigning {} — the client uploads through PUT /blobs/{id}.
func (h *Handler) serveBlobGrant(w http.ResponseWriter, r *http.Request) {
	id, ok := h.admitUpload(w, r)
	if !ok {
		return
	}
	var req struct {
		ByteLength *json.Number `json:"byteLength"`
		MediaType  *string      `json:"mediaType"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxGrantBody))
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil || dec.More() {
		writeError(w, ssp2.Errorf(ssp2.CodeInvalidRequest, "the upload grant body must be {\"byteLength\":<int ≥ 0>,\"mediaType\"?:<string>}"))
		return
	}
	if req.ByteLength == nil {
		writeError(w, ssp2.Errorf(ssp2.CodeInvalidRequest, "byteLength is required"))
		return
	}
	n, err := strconv.ParseInt(req.ByteLength.String(), 10, 64)
	if err != nil || n < 0 || n > ssp2.MaxSafeInt {
		writeError(w, ssp2.Errorf(ssp2.CodeInvalidRequest, "byteLength must be an integer in 0..2^53-1"))
		return
	}
	blobID := r.PathValue("id")
	present, err := h.cfg.Blobs.Grant(r.Context(), id.Partition, blobID, n)
	if err != nil {
		if ssp2.CodeOf(err) == "" {
			h.log.Error("blob grant", "err", err)
			err = ssp2.Errorf(ssp2.CodeInternalError, "internal error")
		}
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case present:
		_, _ = io.WriteString(w, `{"present":true}`+"\n")
	case h.cfg.Engine.BlobPresign():
		url, exp := h.cfg.Engine.SignBlobUpload(id, blobID, n, blobMountURL(r))
		writeURLGrant(w, url, exp)
	default:
		_, _ = io.WriteString(w, "{}\n")
	}
}

// writeURLGrant writes {"url","urlExpiresAtMs"}, the answer of a
// presigned upload grant and of a presigned download (§5.9.3, §5.9.5).
func writeURLGrant(w http.ResponseWriter, url string, expiresAtMs int64) {
	b, _ := json.Marshal(struct {
		URL            string `json:"url"`
		URLExpiresAtMs int64  `json:"urlExpiresAtMs"`
	}{url, expiresAtMs})
	_, _ = w.Write(append(b, '\n'))
}

// blobMountURL is the mount a /blobs/… request came in on.
func blobMountURL(r *http.Request) string {
	m := MountURL(r, "")
	if i := strings.LastIndex(m, "/blobs/"); i >= 0 {
		return m[:i+1]
	}
	return m
}

// writeBlobError answers a refused blob request, logging internal errors.
func (h *Handler) writeBlobError(w http.ResponseWriter, what string, err error) {
	if ssp2.CodeOf(err) == ssp2.CodeInternalError || ssp2.CodeOf(err) == "" {
		h.log.Error(what, "err", err)
		err = ssp2.Errorf(ssp2.CodeInternalError, "internal error")
	}
	writeError(w, err)
}

// admitUpload authenticates an upload and admits its identity.
func (h *Handler) admitUpload(w http.ResponseWriter, r *http.Request) (engine.Identity, bool) {
	id, ok := h.authenticate(w, r)
	if !ok {
		return id, false
	}
	if h.cfg.Blobs == nil {
		writeError(w, errNoBlobs)
		return id, false
	}
	if err := h.cfg.Engine.AdmitBlobUpload(r.Context(), id); err != nil {
		if ssp2.CodeOf(err) == ssp2.CodeInternalError {
			h.log.Error("admit blob upload", "err", err)
		}
		writeError(w, err)
		return id, false
	}
	return id, true
}

// serveBlob is GET /blobs/{id} (SPEC.md §5.9.5): re-authorized on every
// call against the rows that reference the blob, streamed as stored (no
// transport compression: blobs are mostly compressed already). When
// blobs are presigned, an authorized request is answered
// {"url","urlExpiresAtMs"} instead of the bytes (the spec's always-issue
// rule), and GET /blobs/{id}?st=… serves the bytes to anyone holding the
// URL until it expires, reading no host authentication.
func (h *Handler) serveBlob(w http.ResponseWriter, r *http.Request) {
	blobID := r.PathValue("id")
	var (
		b   storage.Blob
		err error
	)
	if r.URL.Query().Has(signedurl.Param) {
		if h.cfg.Blobs == nil {
			writeError(w, errNoBlobs)
			return
		}
		if b, err = h.cfg.Engine.AuthorizeSignedBlob(r.Context(), blobID, r.URL.Query().Get(signedurl.Param)); err != nil {
			h.writeBlobError(w, "signed blob authorization failed", err)
			return
		}
	} else {
		id, ok := h.authenticate(w, r)
		if !ok {
			return
		}
		if h.cfg.Blobs == nil {
			writeError(w, errNoBlobs)
			return
		}
		if b, err = h.cfg.Engine.AuthorizeBlob(r.Context(), id, blobID); err != nil {
			h.writeBlobError(w, "blob authorization failed", err)
			return
		}
		if h.cfg.Engine.BlobPresign() {
			// The URL is a fresh grant per request: never cached.
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			url, exp := h.cfg.Engine.SignBlobDownload(id, blobID, blobMountURL(r))
			if r.Method != http.MethodHead {
				writeURLGrant(w, url, exp)
			}
			return
		}
	}
	hdr := w.Header()
	hdr.Set("ETag", `"`+blobID+`"`)
	hdr.Set("Cache-Control", "private, max-age=0")
	hdr.Set("Vary", "Authorization, Accept-Encoding")
	if etagMatch(r.Header.Get("If-None-Match"), blobID) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	ct := b.MediaType
	if ct == "" {
		ct = "application/octet-stream"
	}
	hdr.Set("Content-Type", ct)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Content-Length", strconv.FormatInt(b.ByteLength, 10))
	if r.Method == http.MethodHead {
		return
	}
	rd, err := h.cfg.Blobs.Open(r.Context(), b)
	if err != nil {
		h.log.Error("open blob", "blob", blobID, "err", err)
		hdr.Del("Content-Length")
		writeError(w, ssp2.Errorf(ssp2.CodeInternalError, "internal error"))
		return
	}
	defer rd.Close()
	dst := &lossWriter{w: newDeadlineWriter(w, h.cfg.WriteTimeout)}
	if _, err := io.Copy(dst, rd); err != nil {
		if dst.lost || r.Context().Err() != nil {
			h.log.Debug("client went away mid-download", "blob", blobID, "err", err)
		} else {
			h.log.Error("stream blob", "blob", blobID, "err", err)
		}
		// A cut connection, not a short body with a clean end.
		panic(http.ErrAbortHandler)
	}
}

// uploadMediaType is the advisory media type an upload declares, kept
// when it parses and says more than application/octet-stream.
func uploadMediaType(ct string) string {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt == "application/octet-stream" {
		return ""
	}
	s := mime.FormatMediaType(mt, params)
	if len(s) > maxMediaTypeLen {
		return ""
	}
	return s
}

// uploadReader reads an upload body: each read extends the read deadline
// by timeout, so a large upload is bounded by the silence between chunks
// rather than the server's whole-request timeout, and the first read
// error is kept to tell a broken body from a refused one.
type uploadReader struct {
	r       io.Reader
	rc      *http.ResponseController
	timeout time.Duration
	at      time.Time
	err     error
}

func (u *uploadReader) Read(p []byte) (int, error) {
	if u.timeout > 0 {
		if now := time.Now(); now.Sub(u.at) >= u.timeout/8 {
			u.at = now
			_ = u.rc.SetReadDeadline(now.Add(u.timeout))
		}
	}
	n, err := u.r.Read(p)
	if err != nil && err != io.EOF && u.err == nil {
		u.err = err
	}
	return n, err
}
