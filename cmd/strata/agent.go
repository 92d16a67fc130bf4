package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/strata-dev/strata/agent"
	"github.com/strata-dev/strata/internal/nudge"
	"github.com/strata-dev/strata/internal/serve"
	"github.com/strata-dev/strata/node"
)

func newAgentCmd(g *globals) *cobra.Command {
	var root, configPath, listen, restartWith, jitter string
	var base agent.Config
	var interval time.Duration
	var lockWait time.Duration
	c := &cobra.Command{
		Use: "agent [--config FILE] [--repo URL] [--interval 2m] [--jitter 20%] [--listen ADDR]",
		Example: `  strata agent
  strata agent --repo https://repo.example.net/strata/ --interval 5m --channel candidate`,
		Short: "Poll the line's repository and apply what the node is missing; serve health and metrics",
		Long: `Run the pull agent on the node at --root (default /). Before every poll it
reads --config (default: the node's own, /etc/strata/agent.yaml below
--root, read without following a link; its settings win over the flags): repo, interval, jitter, max_backoff. It polls the index with a
conditional request, applies pending overlays in order (validation,
restarts and health checks, switching back on failure), backs off
exponentially on failure, and logs each decision on stderr (the journal).

A missing or invalid configuration keeps it running: it reports "not
configured" or "config invalid" in health and metrics and recovers by
itself when the file is fixed.

--listen serves GET /health (JSON), GET /metrics (Prometheus) and POST
/nudge (a nudge signed by a key the node trusts: strata nudge). SIGINT or
SIGTERM stop it, exit 0.`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			p, err := agent.ParsePercent(jitter)
			if err != nil {
				return usageError{fmt.Errorf("--jitter: %w", err)}
			}
			if interval < time.Second {
				return usageError{fmt.Errorf("--interval %s: at least 1s", interval)}
			}
			if err := node.CheckChannel(base.Channel); err != nil {
				return usageError{fmt.Errorf("--channel: %w", err)}
			}
			base.Jitter, base.Interval = p, agent.Duration(interval)
			r, err := restarterFor(restartWith, root)
			if err != nil {
				return err
			}
			log := agentLog(g.progress(), journalStderr())
			a := agent.New(agent.Options{Root: root, ConfigPath: configPath, Base: base, Restarter: r, LockWait: lockWait, Log: log})
			s, err := serve.Listen(listen, a.Handler(), serve.Limits{Conns: 64, Requests: 16, Waits: 1, PerClient: 16})
			if err != nil {
				return err
			}
			log(fmt.Sprintf("agent for %s: health and metrics on http://%s/", root, s.Addr))
			errc := make(chan error, 1)
			go func() { errc <- s.Serve(c.Context(), 5*time.Second) }()
			err = a.Run(c.Context())
			// A signal is the agent's normal end: nil, exit 0.
			return errors.Join(err, <-errc)
		},
	}
	f := c.Flags()
	f.StringVar(&root, "root", "/", "the node")
	f.StringVar(&configPath, "config", "", "configuration file, a path on this host (read before every poll; default: the node's own, ROOT"+agent.DefaultConfigPath+")")
	f.StringVar(&base.Repo, "repo", "", "repository URL or directory (the configuration's repo wins)")
	f.StringVar(&base.Channel, "channel", "", "stable (default: stop at the newest release) or candidate (prereleases too); the configuration's channel wins")
	f.DurationVar(&interval, "interval", agent.DefaultInterval, "time between polls")
	f.StringVar(&jitter, "jitter", "20%", "how much each wait varies, either way")
	f.StringVar(&listen, "listen", "127.0.0.1:9411", "address of the health, metrics and nudge endpoints")
	f.StringVar(&restartWith, "restart-with", "", "systemd (default with --root /), none, or exec:'CMD {unit} {action}'")
	f.DurationVar(&lockWait, "lock-wait", 30*time.Second, "how long an apply waits for the node lock")
	return c
}

func newNudgeCmd(g *globals) *cobra.Command {
	var keyPath, line string
	c := &cobra.Command{
		Use:     "nudge --key K --line LINE URL...",
		Example: `  strata nudge --key ci.key --line web http://10.0.0.7:9411 http://10.0.0.8:9411`,
		Short:   "Make agents poll now: send each a nudge signed with K",
		Long: `Send a signed nudge to each agent URL (its --listen address, such as
http://node7:9411/). An agent takes a nudge only if a key its node trusts
signed it, for its line, made within 5 minutes of its clock and newer than
the last one it took; then it polls at once. Every agent is tried; the
command fails if any refused or could not be reached, naming each.`,
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(c *cobra.Command, urls []string) error {
			key, err := loadKey(keyPath)
			if err != nil {
				return err
			}
			n, err := nudge.Sign(key, line, time.Now())
			if err != nil {
				return usageError{fmt.Errorf("--line: %w", err)}
			}
			type result struct {
				URL    string `json:"url"`
				Result string `json:"result"` // nudged, refused or unreachable
				Error  string `json:"error,omitempty"`
			}
			results := []result{}
			var errs []error
			for _, u := range urls {
				r := result{URL: u, Result: "nudged"}
				if err := nudge.Send(c.Context(), u, n); err != nil {
					r.Result, r.Error = "unreachable", err.Error()
					if errors.Is(err, nudge.ErrRefused) {
						r.Result = "refused"
					}
					errs = append(errs, err)
				}
				results = append(results, r)
			}
			if err := g.output(c.OutOrStdout(), map[string]any{"line": line, "nudges": results}, func(w io.Writer) {
				for _, r := range results {
					if r.Error != "" {
						fmt.Fprintf(w, "%-11s %s: %s\n", r.Result, r.URL, r.Error)
					} else {
						fmt.Fprintf(w, "%-11s %s\n", r.Result, r.URL)
					}
				}
			}); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
	c.Flags().StringVar(&keyPath, "key", "", "signing key the nodes trust")
	c.Flags().StringVar(&line, "line", "", "the agents' line")
	required(c, "key", "line")
	return c
}

// agentLog is the agent's log: line (nil: none) with each entry stamped
// with the time, unless stderr goes to the journal, which stamps lines
// itself.
func agentLog(line func(string), journal bool) func(string) {
	switch {
	case line == nil:
		return func(string) {}
	case journal:
		return line
	}
	return func(s string) { line(time.Now().UTC().Format(time.RFC3339) + " " + s) }
}

// journalStderr reports whether stderr is connected to the journal:
// systemd then names its device and inode in $JOURNAL_STREAM.
func journalStderr() bool {
	dev, ino, ok := strings.Cut(os.Getenv("JOURNAL_STREAM"), ":")
	if !ok {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(2, &st); err != nil {
		return false
	}
	return strconv.FormatUint(st.Dev, 10) == dev && strconv.FormatUint(st.Ino, 10) == ino
}
