package serve_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/repo/storetest"
	"github.com/strata-dev/strata/internal/serve"
)

// fixture serves a fresh repository directory and places members in it.
func fixture(t *testing.T) (dir string, srv *httptest.Server, place func(name string) string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	srv = httptest.NewServer(serve.Handler(dir, func(s string) { t.Log(s) }))
	t.Cleanup(srv.Close)
	place = func(name string) string {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return dir, srv, place
}

// The HTTP store, against strata's own server, passes the suite every
// store passes: what the server will not serve (symlinks out, FIFOs,
// devices, directories) is refused, never read.
func TestHTTPStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) *storetest.Fixture {
		_, srv, place := fixture(t)
		outside := t.TempDir()
		if err := os.WriteFile(filepath.Join(outside, "x"), []byte("outside"), 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := repo.HTTP(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		return &storetest.Fixture{
			Store:         st,
			File:          func(name string, data []byte) error { return os.WriteFile(place(name), data, 0o644) },
			SymlinkOut:    func(name string) error { return os.Symlink(filepath.Join(outside, "x"), place(name)) },
			DirSymlinkOut: func(name string) error { return os.Symlink(outside, place(name)) },
			FIFO:          func(name string) error { return unix.Mkfifo(place(name), 0o644) },
			Device: func(name string) error {
				if os.Geteuid() != 0 {
					return errors.ErrUnsupported
				}
				return unix.Mknod(place(name), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3)))
			},
		}
	})
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// Conditional and range requests, caching headers, and what is not served.
func TestHandler(t *testing.T) {
	_, srv, place := fixture(t)
	index := []byte(`{"kind":"index"}`)
	if err := os.WriteFile(place("index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	payload := bytes.Repeat([]byte("0123456789"), 1000)
	if err := os.WriteFile(place("overlays/a.overlay.tar.zst"), payload, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(place(".lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	resp, body := get(t, srv.URL+"/index.json", nil)
	etag, lastMod := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if resp.StatusCode != 200 || !bytes.Equal(body, index) || etag == "" || lastMod == "" || resp.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("GET index: %s %q etag %q last-modified %q cache %q", resp.Status, body, etag, lastMod, resp.Header.Get("Cache-Control"))
	}
	if resp, body := get(t, srv.URL+"/index.json", map[string]string{"If-None-Match": etag}); resp.StatusCode != 304 || len(body) != 0 {
		t.Errorf("If-None-Match: %s with %d bytes, want 304 and nothing", resp.Status, len(body))
	}
	// The 304 of an unchanged poll carries the validators and caching
	// rules; an If-None-Match list names the tag anywhere, weak or not.
	for _, inm := range []string{etag, `"0-0", W/` + etag} {
		resp, _ := get(t, srv.URL+"/index.json", map[string]string{"If-None-Match": inm})
		if resp.StatusCode != 304 || resp.Header.Get("ETag") != etag || resp.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("If-None-Match %s: %s, ETag %q, Cache-Control %q", inm, resp.Status, resp.Header.Get("ETag"), resp.Header.Get("Cache-Control"))
		}
	}
	if resp, _ := get(t, srv.URL+"/index.json", map[string]string{"If-None-Match": etag, "If-Match": `"0-0"`}); resp.StatusCode != http.StatusPreconditionFailed {
		t.Errorf("If-Match of another tag with If-None-Match of this one: %s, want 412 (If-Match comes first)", resp.Status)
	}
	if resp, _ := get(t, srv.URL+"/index.json", map[string]string{"If-None-Match": `"0-0"`}); resp.StatusCode != 200 {
		t.Errorf("If-None-Match of another tag: %s, want 200", resp.Status)
	}
	if resp, _ := get(t, srv.URL+"/index.json", map[string]string{"If-Modified-Since": lastMod}); resp.StatusCode != 304 {
		t.Errorf("If-Modified-Since: %s, want 304", resp.Status)
	}
	// A new publication changes the validators.
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(place("index.json"), append(index, ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, srv.URL+"/index.json", map[string]string{"If-None-Match": etag}); resp.StatusCode != 200 {
		t.Errorf("after a change, If-None-Match: %s, want 200", resp.Status)
	}
	resp, body = get(t, srv.URL+"/overlays/a.overlay.tar.zst", map[string]string{"Range": "bytes=10-19"})
	if resp.StatusCode != 206 || string(body) != "0123456789" || !strings.HasPrefix(resp.Header.Get("Content-Range"), "bytes 10-19/10000") {
		t.Errorf("range: %s %q %q", resp.Status, body, resp.Header.Get("Content-Range"))
	}
	if cc := resp.Header.Get("Cache-Control"); !strings.Contains(cc, "immutable") {
		t.Errorf("overlay Cache-Control %q, want immutable", cc)
	}
	// Issue 25: many one-byte ranges made a multipart answer larger than
	// the member; past 16 the member is sent whole.
	many := "bytes=0-0"
	for i := 1; i < 5000; i++ {
		many += fmt.Sprintf(",%d-%d", 2*i, 2*i)
	}
	if resp, body := get(t, srv.URL+"/overlays/a.overlay.tar.zst", map[string]string{"Range": many}); resp.StatusCode != 200 || len(body) != len(payload) {
		t.Errorf("5,000 ranges: %s with %d bytes, want the member whole (200, %d bytes)", resp.Status, len(body), len(payload))
	}
	if resp, body := get(t, srv.URL+"/overlays/a.overlay.tar.zst", map[string]string{"Range": "bytes=0-0,10-10"}); resp.StatusCode != 206 || len(body) >= len(payload) {
		t.Errorf("two ranges: %s with %d bytes, want 206 multipart", resp.Status, len(body))
	}
	for path, want := range map[string]int{"/.lock": 404, "/overlays/": 404, "/overlays": 403, "/missing.json": 404, "/../etc/passwd": 404, "/index.json%00": 404, "/a%01b": 404} {
		if resp, _ := get(t, srv.URL+path, nil); resp.StatusCode != want {
			t.Errorf("GET %s: %s, want %d", path, resp.Status, want)
		}
	}
	// An oversized nudge is 413, not a server error.
	for _, chunked := range []bool{false, true} {
		var body io.Reader = bytes.NewReader(make([]byte, 1<<20))
		if chunked {
			body = io.MultiReader(body) // no length known: sent chunked
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/nudge", body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a 1 MiB nudge (chunked %v): %v %v, want 413", chunked, resp, err)
		}
		if resp != nil {
			resp.Body.Close()
		}
	}
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/index.json", strings.NewReader("x"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 405 {
		t.Errorf("PUT: %v %v, want 405", resp, err)
	}
}

// A conditional request is answered 304 only for a regular member: one
// replaced by a symlink (to a file outside or to another member), a FIFO
// or a directory is refused as a plain GET is, whatever tag is asked.
func TestConditionalChecksMember(t *testing.T) {
	dir, srv, place := fixture(t)
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(place("other.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for what, plant := range map[string]func(p string) error{
		"symlink out": func(p string) error { return os.Symlink(outside, p) },
		"symlink in":  func(p string) error { return os.Symlink(filepath.Join(dir, "other.json"), p) },
		"FIFO":        func(p string) error { return unix.Mkfifo(p, 0o644) },
		"directory":   func(p string) error { return os.Mkdir(p, 0o755) },
	} {
		p := place("index.json")
		if err := plant(p); err != nil {
			t.Fatal(err)
		}
		for _, inm := range []string{"*", `"2-0"`} {
			resp, body := get(t, srv.URL+"/index.json", map[string]string{"If-None-Match": inm})
			if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), "secret") {
				t.Errorf("%s, If-None-Match %s: %s %q, want 403", what, inm, resp.Status, body)
			}
		}
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
}

// A poll of an unchanged index is one request, answered 304.
func TestPollUnchanged(t *testing.T) {
	dir, _, place := fixture(t)
	var requests, notModified int
	inner := serve.Handler(dir, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		rec := &statusRecorder{ResponseWriter: w}
		inner.ServeHTTP(rec, r)
		if rec.status == 304 {
			notModified++
		}
	}))
	defer srv.Close()
	if err := os.WriteFile(place("index.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := repo.HTTP(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if changed, err := st.Poll(ctx); err != nil || !changed {
		t.Fatalf("first poll: %v, %v; want changed", changed, err)
	}
	// The index the poll fetched is read without another request.
	if b, err := repo.ReadMember(ctx, st, "index.json", 100); err != nil || string(b) != "{}" {
		t.Fatalf("reading the polled index: %q, %v", b, err)
	}
	if requests != 1 {
		t.Errorf("%d requests for a poll and a read, want 1", requests)
	}
	requests = 0
	if changed, err := st.Poll(ctx); err != nil || changed {
		t.Fatalf("second poll: %v, %v; want unchanged", changed, err)
	}
	if requests != 1 || notModified != 1 {
		t.Errorf("unchanged poll: %d requests, %d answered 304; want 1 and 1", requests, notModified)
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// Shutdown waits for requests in flight and stops.
func TestServeShutdown(t *testing.T) {
	dir, _, place := fixture(t)
	if err := os.WriteFile(place("index.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := serve.Listen("127.0.0.1:0", serve.Handler(dir, nil), serve.Limits{Conns: 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, 5*time.Second) }()
	if resp, body := get(t, "http://"+s.Addr+"/index.json", nil); resp.StatusCode != 200 || string(body) != "{}" {
		t.Fatalf("GET: %s %q", resp.Status, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context was cancelled")
	}
	if _, err := http.Get("http://" + s.Addr + "/index.json"); err == nil {
		t.Error("the server still answers after shutdown")
	}
}
