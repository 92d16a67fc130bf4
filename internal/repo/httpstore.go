package repo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/strata-dev/strata/manifests"
)

// HTTPStore is a repository served over HTTP(S) by any web server, CDN or
// object store: members are fetched with GET at Base joined with their
// name. It is read-only. The index and its signature are kept with their
// validators (ETag, Last-Modified), so Poll costs one conditional request,
// a 304 when nothing was published.
type HTTPStore struct {
	// Base is the repository's URL; member names are resolved below it.
	Base *url.URL
	// Client makes the requests (default: NewHTTPClient()).
	Client *http.Client
	// UserAgent is sent with every request.
	UserAgent string

	mu    sync.Mutex
	docs  map[string]*cachedDoc // index.json and its signature
	fresh map[string]bool       // docs Poll just fetched, served once without a request
}

// cachedDoc is a document with the validators the server gave it.
type cachedDoc struct {
	body          []byte
	etag, lastMod string
}

var _ Store = (*HTTPStore)(nil)

// NewHTTPClient returns the client an HTTPStore uses by default: bounded
// connection, TLS and response-header waits, no overall deadline (an
// image takes as long as it takes; contexts cancel), no transparent
// decompression, so sizes are the members' own, and the redirect policy
// of checkRedirect (no link-local address ever, no loopback or private
// one unless the request started at one, no TLS downgrade, at most 5).
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: dialControl}).DialContext
	t.TLSHandshakeTimeout = 30 * time.Second
	t.ResponseHeaderTimeout = 60 * time.Second
	t.DisableCompression = true
	t.MaxIdleConnsPerHost = 4
	return &http.Client{Transport: t, CheckRedirect: checkRedirect}
}

// HTTP returns the store of the repository at base (an http or https URL).
func HTTP(base string) (*HTTPStore, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("repository URL %q: want http://HOST/PATH or https://HOST/PATH: %w", base, ErrLocation)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("repository URL %q: no user, query or fragment: %w", base, ErrLocation)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return &HTTPStore{Base: u, Client: NewHTTPClient(), UserAgent: "strata"}, nil
}

// String returns the repository's URL.
func (h *HTTPStore) String() string { return h.Base.String() }

func (h *HTTPStore) url(name string) string {
	return h.Base.ResolveReference(&url.URL{Path: name}).String()
}

// Open fetches member name; see Store. A response without a length gives
// size -1, and the reader then stops where the caller's bound says. A
// member the server refuses (403) is refused as not a regular file, one it
// does not have (404, 410) is fs.ErrNotExist.
func (h *HTTPStore) Open(ctx context.Context, name string) (io.ReadCloser, int64, error) {
	if !fs.ValidPath(name) || name == "." {
		return nil, 0, &fs.PathError{Op: "open", Path: h.url(""), Err: fmt.Errorf("member %q: %w", name, manifests.ErrUnsafePath)}
	}
	if doc := h.cachedFresh(name); doc != nil {
		return &member{ctx: ctx, f: bytes.NewReader(doc.body), left: -1}, int64(len(doc.body)), nil
	}
	if isDoc(name) {
		doc, _, err := h.fetchDoc(ctx, name)
		if err != nil {
			return nil, 0, err
		}
		return &member{ctx: ctx, f: bytes.NewReader(doc.body), left: -1}, int64(len(doc.body)), nil
	}
	resp, err := h.get(ctx, name, nil)
	if err != nil {
		return nil, 0, err
	}
	return &member{ctx: ctx, f: resp.Body, left: -1}, resp.ContentLength, nil
}

// Poll fetches the index conditionally and reports whether it changed
// since this store last fetched it (true the first time). An unchanged
// index costs one request answered 304 Not Modified.
func (h *HTTPStore) Poll(ctx context.Context) (bool, error) {
	_, changed, err := h.fetchDoc(ctx, IndexFile)
	if err != nil {
		return false, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fresh == nil {
		h.fresh = map[string]bool{}
	}
	h.fresh[IndexFile] = true
	return changed, nil
}

func isDoc(name string) bool { return name == IndexFile || name == SigPath(IndexFile) }

func (h *HTTPStore) cachedFresh(name string) *cachedDoc {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.fresh[name] {
		return nil
	}
	delete(h.fresh, name)
	return h.docs[name]
}

// fetchDoc fetches a document, conditionally when this store holds it,
// bounded by manifests.MaxManifestSize (the index by MaxIndexSize).
func (h *HTTPStore) fetchDoc(ctx context.Context, name string) (*cachedDoc, bool, error) {
	h.mu.Lock()
	old := h.docs[name]
	h.mu.Unlock()
	hdr := http.Header{}
	if old != nil {
		if old.etag != "" {
			hdr.Set("If-None-Match", old.etag)
		}
		if old.lastMod != "" {
			hdr.Set("If-Modified-Since", old.lastMod)
		}
	}
	resp, err := h.get(ctx, name, hdr)
	if errors.Is(err, errNotModified) && old != nil {
		return old, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	limit := int64(manifests.MaxManifestSize)
	if name == IndexFile {
		limit = manifests.MaxIndexSize
	}
	if resp.ContentLength > limit {
		return nil, false, fmt.Errorf("reading %s: %w: %d bytes (limit %d)", h.url(name), manifests.ErrTooLarge, resp.ContentLength, limit)
	}
	body, err := manifests.ReadLimited(&member{ctx: ctx, f: resp.Body, left: -1}, limit)
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", h.url(name), err)
	}
	doc := &cachedDoc{body: body, etag: resp.Header.Get("ETag"), lastMod: resp.Header.Get("Last-Modified")}
	h.mu.Lock()
	if h.docs == nil {
		h.docs = map[string]*cachedDoc{}
	}
	h.docs[name] = doc
	h.mu.Unlock()
	return doc, true, nil
}

var errNotModified = errors.New("304 not modified")

// get sends a GET for name and returns a 200 response, or the error its
// status means.
func (h *HTTPStore) get(ctx context.Context, name string, hdr http.Header) (*http.Response, error) {
	u := h.url(name)
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "GET", Path: u, Err: err}
	}
	rctx, watch, cancel := withIdleTimeout(ctx)
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
	if err != nil {
		cancel()
		return nil, &fs.PathError{Op: "GET", Path: u, Err: err}
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("User-Agent", h.UserAgent)
	req.Header.Set("Accept-Encoding", "identity")
	client := h.Client
	if client == nil {
		client = NewHTTPClient()
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, &fs.PathError{Op: "GET", Path: u, Err: err}
	}
	if resp.StatusCode == http.StatusOK {
		resp.Body = watch(resp.Body)
		return resp, nil
	}
	resp.Body.Close()
	cancel()
	switch resp.StatusCode {
	case http.StatusNotModified:
		return nil, errNotModified
	case http.StatusNotFound, http.StatusGone:
		return nil, &fs.PathError{Op: "GET", Path: u, Err: fs.ErrNotExist}
	case http.StatusForbidden:
		return nil, &fs.PathError{Op: "GET", Path: u, Err: fmt.Errorf("%w: the server refuses it (403 Forbidden: not a regular member, or access denied)", ErrNotRegular)}
	}
	return nil, &fs.PathError{Op: "GET", Path: u, Err: fmt.Errorf("server answered %s", resp.Status)}
}
