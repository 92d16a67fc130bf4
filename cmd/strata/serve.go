package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/serve"
)

func newServeCmd(g *globals) *cobra.Command {
	var listen string
	var grace time.Duration
	var lim serve.Limits
	c := &cobra.Command{
		Use:     "serve REPO [--listen ADDR]",
		Example: `  strata serve repo --listen :8080`,
		Short:   "Serve a repository over HTTP (read-only) for nodes to pull from",
		Long: `Serve the repository in directory REPO over HTTP: GET and HEAD of its
members, with ETag and Last-Modified, conditional and range requests. The
index is served for revalidation (Cache-Control: no-cache), images and
overlays as immutable. Members are opened as strata opens them locally:
never through a symlink, a FIFO or a device (403), never a hidden file.

It limits work, not connections: idle keep-alive connections are closed
when the server needs their slot, nudge waits and index requests have
pools of their own, and one client address gets at most its share.

For tests and small sites; any web server or CDN serving the same directory
works the same (see docs/fleet.md). SIGINT or SIGTERM stop it gracefully
(requests in flight get --grace to finish), exit 0.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			dir := a[0]
			for flag, v := range map[string]int{"--max-conns": lim.Conns, "--max-requests": lim.Requests, "--max-waits": lim.Waits, "--max-per-client": lim.PerClient} {
				if v < 0 {
					return usageError{fmt.Errorf("%s %d: at least 1 (0: the default)", flag, v)}
				}
			}
			if repo.IsURL(dir) {
				return usageError{fmt.Errorf("%s is a URL; serve a repository directory", dir)}
			}
			if _, err := os.Lstat(dir + "/" + repo.IndexFile); err != nil {
				return fmt.Errorf("%s is not a repository: %w", dir, err)
			}
			log := g.progress()
			s, err := serve.Listen(listen, serve.Handler(dir, log), lim)
			if err != nil {
				return err
			}
			if log != nil {
				l := s.Limits
				log(fmt.Sprintf("serving %s on http://%s/ (at most %d connections, %d requests, %d nudge waits, %d per client)", dir, s.Addr, l.Conns, l.Requests, l.Waits, l.PerClient))
			}
			// A signal is the server's normal end: nil, exit 0.
			return s.Serve(c.Context(), grace)
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address to listen on (HOST:PORT; :PORT for every address)")
	c.Flags().DurationVar(&grace, "grace", 10*time.Second, "how long requests in flight may take to finish on shutdown")
	c.Flags().IntVar(&lim.Conns, "max-conns", 0, "open connections; at the limit the longest-idle one is closed (0: the file limit less 256)")
	c.Flags().IntVar(&lim.Requests, "max-requests", 0, "member requests served at once, and index requests in a pool of their own (0: 256)")
	c.Flags().IntVar(&lim.Waits, "max-waits", 0, "nudge waits held at once; more get 503 (0: --max-conns less twice --max-requests, at least half); a held wait gives its connection to a poll that needs it")
	c.Flags().IntVar(&lim.PerClient, "max-per-client", 0, "requests one client address may have in flight; more get 429 (0: 64)")
	return c
}
