package serve

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/manifests"
)

// Handler serves the repository in directory dir: GET and HEAD of its
// members, and /nudge, a relay of nudges to the agents waiting on it (a
// repository has no member of that name). The index and its signature must be revalidated by caches
// (Cache-Control: no-cache); images and overlays never change under their
// names and may be cached for good. Hidden names (a leading dot: the
// repository's lock, files being written) are not served. log, if not
// nil, is told about failures that are the server's own.
func Handler(dir string, log func(string)) http.Handler {
	st := repo.Dir(dir)
	// Every request resolves a member beneath the directory: it stays
	// open, and is opened again each second (a directory moved into its
	// place is served within one).
	st.KeepOpen(time.Second)
	nudges := newRelay(dir, log)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/nudge" {
			nudges.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(r.URL.Path, "/")
		if !fs.ValidPath(name) || name == "." || hidden(name) || strings.ContainsFunc(name, unprintable) {
			http.NotFound(w, r)
			return
		}
		// Many small ranges make a multipart answer larger than the
		// member itself: past maxRanges, the member is sent whole (as
		// nginx's max_ranges does).
		if v := r.Header.Get("Range"); strings.Count(v, ",") >= maxRanges {
			r.Header.Del("Range")
		}
		// An unchanged poll (If-None-Match with the member's ETag) is
		// answered from the member's metadata alone: its checks are
		// OpenFile's, without the open for reading. Anything else,
		// failures included, takes the full path below, and so does a
		// request with preconditions that come first (RFC 9110 13.2.2).
		if inm := r.Header.Get("If-None-Match"); inm != "" && r.Header.Get("If-Match") == "" && r.Header.Get("If-Unmodified-Since") == "" {
			if size, mtime, err := st.StatFile(r.Context(), name); err == nil {
				if tag := etag(size, mtime); etagListed(inm, tag) {
					headers(w.Header(), name, tag)
					w.WriteHeader(http.StatusNotModified)
					return
				}
			}
		}
		f, fi, err := st.OpenFile(r.Context(), name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			http.NotFound(w, r)
			return
		case errors.Is(err, repo.ErrNotRegular), errors.Is(err, manifests.ErrUnsafePath):
			http.Error(w, "not a repository member", http.StatusForbidden)
			return
		case err != nil:
			if log != nil {
				log(fmt.Sprintf("serving %s: %v", name, err))
			}
			http.Error(w, "cannot read the member", http.StatusInternalServerError)
			return
		}
		defer f.Close()
		headers(w.Header(), name, etag(fi.Size(), fi.ModTime()))
		w.Header().Set("Content-Type", contentType(name))
		http.ServeContent(w, r, "", fi.ModTime(), f)
	})
}

// etag is a member's entity tag: its size and modification time.
func etag(size int64, mtime time.Time) string {
	b := make([]byte, 0, 36)
	b = append(b, '"')
	b = strconv.AppendInt(b, size, 16)
	b = append(b, '-')
	b = strconv.AppendInt(b, mtime.UnixNano(), 16)
	return string(append(b, '"'))
}

// etagListed reports whether an If-None-Match value lists tag (weakly
// compared, as RFC 9110 asks for If-None-Match) or is "*".
func etagListed(inm, tag string) bool {
	for t := range strings.SplitSeq(inm, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == tag {
			return true
		}
	}
	return false
}

// headers sets what every answer about member name carries, 304s
// included: its ETag, how caches may keep it, no sniffing.
func headers(h http.Header, name, tag string) {
	h.Set("ETag", tag)
	if name == repo.IndexFile || name == repo.SigPath(repo.IndexFile) {
		h.Set("Cache-Control", "no-cache")
	} else {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	}
	h.Set("X-Content-Type-Options", "nosniff")
}

// maxRanges bounds the ranges one request may ask for.
const maxRanges = 16

// unprintable reports a control character (NUL included), which no
// member name has.
func unprintable(r rune) bool { return r < 0x20 || r == 0x7f }

func hidden(name string) bool {
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") {
			return true
		}
	}
	return false
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".json":
		return "application/json"
	case ".minisig":
		return "text/plain; charset=utf-8"
	}
	return "application/octet-stream"
}

// Server is a running repository server.
type Server struct {
	// Addr is the address it listens on (with the port chosen when the
	// requested one was 0).
	Addr string
	// Limits are the limits it serves within.
	Limits Limits
	srv    *http.Server
	ln     net.Listener
}

// Listen starts listening on addr for handler within limits (zero fields:
// DefaultLimits); Serve then serves. A request's header must arrive
// within 10 seconds; responses have no deadline (an image takes as long as
// it takes). Connections idle for 2 minutes are closed, and sooner when
// the server needs their slot.
func Listen(addr string, handler http.Handler, limits Limits) (*Server, error) {
	limits = limits.withDefaults()
	// No TCP keep-alive probes on accepted connections (Go's default
	// costs four setsockopt calls on each): nothing here stays idle longer
	// than the probes would take to find a dead peer (idle connections
	// are closed after 2 minutes, a nudge wait ends after RelayWait).
	lc := net.ListenConfig{KeepAlive: -1}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving: %w", err)
	}
	t := newConns(limits.Conns)
	return &Server{
		Addr:   ln.Addr().String(),
		Limits: limits,
		ln:     &limitListener{Listener: ln, t: t, done: make(chan struct{})},
		srv: &http.Server{
			Handler:           newGate(limits).wrap(handler),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ConnState:         t.state,
			ConnContext:       connContext,
		},
	}, nil
}

// Serve serves until ctx is done, then shuts down gracefully: it stops
// accepting, lets requests in flight finish for up to grace, then closes
// what is left.
func (s *Server) Serve(ctx context.Context, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving on %s: %w", s.Addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.srv.Close()
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("shutting down %s: %w", s.Addr, err)
	}
	return nil
}
