package repo

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// Issue 25: redirects were followed to any host, link-local metadata
// addresses included.
func TestRedirectPolicy(t *testing.T) {
	req := func(u string) *http.Request {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Request{URL: p}
	}
	for _, c := range []struct {
		from, to string
		hops     int
		ok       bool
	}{
		{"https://repo.example.net/r/", "https://cdn.example.org/r/index.json", 1, true},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8081/index.json", 1, true},
		{"https://repo.example.net/", "http://repo.example.net/index.json", 1, false},
		{"https://repo.example.net/", "https://127.0.0.1/index.json", 1, false},
		{"https://repo.example.net/", "https://localhost/index.json", 1, false},
		{"https://repo.example.net/", "https://10.0.0.5/index.json", 1, false},
		{"https://repo.example.net/", "https://[::1]/index.json", 1, false},
		{"https://repo.example.net/", "https://169.254.169.254/latest/meta-data/", 1, false},
		{"https://repo.example.net/", "https://cdn.example.org/", maxRedirects, false},
	} {
		via := make([]*http.Request, c.hops)
		for i := range via {
			via[i] = req(c.from)
		}
		err := checkRedirect(req(c.to), via)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrRedirect)) {
			t.Errorf("%s -> %s (%d hops): %v, want ok %v", c.from, c.to, c.hops, err, c.ok)
		}
	}
}

// A server that redirects a node to a link-local address (a cloud's
// metadata service) gets no connection there, whatever the origin.
func TestRedirectToLinkLocalRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
	}))
	defer srv.Close()
	st, err := HTTP(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = st.Open(context.Background(), IndexFile)
	if !errors.Is(err, ErrRedirect) || !strings.Contains(err.Error(), "link-local") {
		t.Fatalf("Open through a redirect to 169.254.169.254: %v, want ErrRedirect (link-local)", err)
	}
}
