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
	var maxConns int
	c := &cobra.Command{
		Use:     "serve REPO [--listen ADDR]",
		Example: `  strata serve repo --listen :8080`,
		Short:   "Serve a repository over HTTP (read-only) for nodes to pull from",
		Long: `Serve the repository in directory REPO over HTTP: GET and HEAD of its
members, with ETag and Last-Modified, conditional and range requests. The
index is served for revalidation (Cache-Control: no-cache), images and
overlays as immutable. Members are opened as strata opens them locally:
never through a symlink, a FIFO or a device (403), never a hidden file.

For tests and small sites; any web server or CDN serving the same directory
works the same (see docs/fleet.md). SIGINT or SIGTERM stop it gracefully
(requests in flight get --grace to finish), exit 0.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			dir := a[0]
			if maxConns < 1 {
				return usageError{fmt.Errorf("--max-conns %d: at least 1", maxConns)}
			}
			if repo.IsURL(dir) {
				return usageError{fmt.Errorf("serve: %s is a URL; serve a repository directory", dir)}
			}
			if _, err := os.Lstat(dir + "/" + repo.IndexFile); err != nil {
				return fmt.Errorf("serve: %s is not a repository: %w", dir, err)
			}
			log := g.progress()
			s, err := serve.Listen(listen, serve.Handler(dir, log), maxConns)
			if err != nil {
				return err
			}
			if log != nil {
				log(fmt.Sprintf("serving %s on http://%s/", dir, s.Addr))
			}
			// A signal is the server's normal end: nil, exit 0.
			return s.Serve(c.Context(), grace)
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "address to listen on (HOST:PORT; :PORT for every address)")
	c.Flags().DurationVar(&grace, "grace", 10*time.Second, "how long requests in flight may take to finish on shutdown")
	c.Flags().IntVar(&maxConns, "max-conns", 4096, "connections served at once (more wait)")
	return c
}
