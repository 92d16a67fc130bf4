package serve_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-dev/strata/internal/serve"
)

// BenchmarkPoll304 is an agent's unchanged poll as the handler sees it:
// GET /index.json with the ETag of the last answer, answered 304 (no
// network: the handler's own cost, for profiling; issue 24).
func BenchmarkPoll304(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.json"), make([]byte, 64<<10), 0o644); err != nil {
		b.Fatal(err)
	}
	h := serve.Handler(dir, nil)
	first := httptest.NewRecorder()
	h.ServeHTTP(first, httptest.NewRequest(http.MethodGet, "/index.json", nil))
	etag := first.Header().Get("ETag")
	if first.Code != http.StatusOK || etag == "" {
		b.Fatalf("first GET: %d, ETag %q", first.Code, etag)
	}
	req := httptest.NewRequest(http.MethodGet, "/index.json", nil)
	req.Header.Set("If-None-Match", etag)
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusNotModified {
			b.Fatalf("poll: %d, want 304", w.Code)
		}
	}
}
