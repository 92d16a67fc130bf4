package repo_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/internal/repo"
)

// A server that sends its headers and then stalls is abandoned once no
// byte has arrived for IdleTimeout, whatever the caller's context.
func TestHTTPStalledBody(t *testing.T) {
	old := repo.IdleTimeout
	repo.IdleTimeout = 300 * time.Millisecond
	defer func() { repo.IdleTimeout = old }()
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("x"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	st, err := repo.HTTP(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"index.json", "overlays/a.overlay.tar.zst"} {
		_, err := repo.ReadMember(context.Background(), st, name, 1<<20)
		if err == nil || !strings.Contains(err.Error(), "no data received") {
			t.Errorf("%s from a stalled server: %v, want it abandoned", name, err)
		}
	}
}
