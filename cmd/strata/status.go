package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-dev/strata/fleet"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/serve"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/schema"
)

func newStatusCmd(g *globals) *cobra.Command {
	var root, diskPath, restartWith, inventory, repoLoc, line, group, serveAddr string
	var timeout, refresh time.Duration
	var ssh *fleet.SSH
	c := &cobra.Command{
		Use:   "status (--root DIR | --disk DISK | --inventory INV [--repo REPO] [--group G])",
		Short: "Show a node's image, head, layers, debts and last failure",
		Long: `Show what the node at --root is and what it owes: its backend (dir or
overlayfs) and, for overlayfs, whether its stacks are active; its line,
image and head; the overlays in effect (the layers, oldest first); an
interrupted run waiting to be settled; restarts still due (restart-pending
pays them); units that take a change only at the next boot (reboot
required: the bus, PID 1's own daemons, units refusing manual restarts);
and the last failed attempt, if the head has not moved since. It changes
nothing. --disk reads the node on a provisioned disk that is not running,
mounted read-only (not a byte of the disk changes).

With --inventory it reports a fleet instead: each node's agent health
(the inventory's health URLs, fetched in parallel, --timeout each; over
SSH, strata health, for nodes without one): its
head, how far behind the reference head it is (the repository's with
--repo, else the newest any node reports), whether its config files and
running services match its head (config 1/0), restarts owed, the last
failure and its clock skew; worst first, then a summary. It exits 3 when
any node is behind, failing or unreachable.

With --serve ADDR it serves the same as a web page instead (server-rendered
HTML that reloads itself every --refresh, one row per node with its
sequence at a glance; /status.json for machines), gathering the status in
the background every --refresh, until stopped (SIGINT or SIGTERM).`,
		Example: `  strata status --root /
  strata status --inventory fleet.yaml --repo https://repo.example.net/
  strata status --inventory fleet.yaml --repo repo --serve 127.0.0.1:9400`,
		Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error {
			if n := btoi(root != "") + btoi(diskPath != "") + btoi(inventory != ""); n != 1 {
				return usageError{fmt.Errorf("give one of --root DIR, --disk DISK or --inventory INV")}
			}
			if diskPath != "" {
				return statusDisk(c, g, diskPath)
			}
			if inventory != "" {
				return fleetStatus(c, g, fleetArgs{inventory, repoLoc, line, group, serveAddr, timeout, refresh, ssh})
			}
			if serveAddr != "" {
				return usageError{fmt.Errorf("--serve needs --inventory")}
			}
			obs, err := observerFor(restartWith, root)
			if err != nil {
				return err
			}
			n, err := node.Open(root, node.Options{Observer: obs})
			if err != nil {
				return err
			}
			st, err := n.Status(c.Context())
			if err != nil {
				return err
			}
			return g.output(c.OutOrStdout(), st, func(w io.Writer) { printStatus(w, st) })
		},
	}
	c.Flags().StringVar(&root, "root", "", "node root directory")
	c.Flags().StringVar(&diskPath, "disk", "", "provisioned disk (image file or block device) of a node that is not running")
	c.Flags().StringVar(&restartWith, "restart-with", "", observeWithHelp)
	c.Flags().StringVar(&inventory, "inventory", "", "fleet inventory (YAML)")
	c.Flags().StringVar(&repoLoc, "repo", "", "with --inventory: the repository whose head is the reference")
	c.Flags().StringVar(&line, "line", "", "with --repo: the line (when the repository has several)")
	c.Flags().StringVar(&group, "group", "", "with --inventory: only the nodes of this group")
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "with --inventory: how long each node may take to answer")
	c.Flags().StringVar(&serveAddr, "serve", "", "with --inventory: serve the status as a web page on HOST:PORT")
	c.Flags().DurationVar(&refresh, "refresh", 10*time.Second, "with --serve: how often the status is gathered and the page reloads")
	ssh = sshFlags(c.Flags())
	return c
}

type fleetArgs struct {
	inventory, repoLoc, line, group, serve string
	timeout, refresh                       time.Duration
	ssh                                    *fleet.SSH
}

func fleetStatus(c *cobra.Command, g *globals, a fleetArgs) error {
	inventory, repoLoc, line, group, timeout := a.inventory, a.repoLoc, a.line, a.group, a.timeout
	nodes, err := loadNodes(inventory, group)
	if err != nil {
		return err
	}
	o := fleet.StatusOptions{Timeout: timeout}
	if needsSSH(nodes) {
		// Nodes without a health URL are asked over SSH; SSH settings
		// that cannot be read make those nodes unreachable, with the
		// reason, not the others.
		defer a.ssh.Close()
		o.SSH = a.ssh
	}
	if a.serve != "" {
		if a.refresh < time.Second {
			return usageError{fmt.Errorf("--refresh %s: at least 1s", a.refresh)}
		}
		po := fleet.PageOptions{StatusOptions: o, Refresh: a.refresh}
		if repoLoc != "" {
			po.Reference = func(ctx context.Context) (string, []manifests.Ref, error) {
				return repo.LineVersions(ctx, repoLoc, line)
			}
			// A repository that cannot be read now is an error now, not
			// a page that says so forever.
			if _, _, err := po.Reference(c.Context()); err != nil {
				return err
			}
		}
		page := fleet.NewPage(nodes, po)
		s, err := serve.Listen(a.serve, page, serve.Limits{Conns: 256, Requests: 64, PerClient: 32})
		if err != nil {
			return err
		}
		go page.Run(c.Context())
		if log := g.progress(); log != nil {
			log(fmt.Sprintf("serving the status of %d nodes on http://%s/", len(nodes), s.Addr))
		}
		return s.Serve(c.Context(), 5*time.Second) // a signal ends it: nil, exit 0
	}
	if repoLoc != "" {
		if o.LineName, o.Line, err = repo.LineVersions(c.Context(), repoLoc, line); err != nil {
			return err
		}
	}
	rep := fleet.Status(c.Context(), nodes, o)
	if err := g.output(c.OutOrStdout(), rep, func(w io.Writer) { printFleet(w, rep) }); err != nil {
		return err
	}
	return rep.Err()
}

// needsSSH reports whether some node has no health URL.
func needsSSH(nodes []fleet.Node) bool {
	for _, n := range nodes {
		if n.Health == "" {
			return true
		}
	}
	return false
}

func printFleet(w io.Writer, rep *fleet.Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tHEAD\tBEHIND\tCONFIG\tDIGEST\tLOADED\tPENDING\tSKEW\tNOTE")
	for _, n := range rep.Sorted() {
		behind := "?"
		if n.Behind >= 0 {
			behind = fmt.Sprint(n.Behind)
		}
		head := n.Head
		if head == "" {
			head = "-"
		}
		digest, loaded := "-", "-"
		if d := strings.TrimPrefix(n.ConfigDigest, "sha256:"); len(d) >= 12 {
			digest = d[:12]
		}
		if !n.LoadedAt.IsZero() {
			loaded = n.LoadedAt.UTC().Format(time.RFC3339)
		}
		// What a node reports is printed as text: no control character
		// of it reaches the terminal.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", n.Name, n.State, printable(head), behind, n.ConfigMatches, printable(digest), loaded, n.Pending, n.Skew, printable(n.Notes()))
	}
	tw.Flush()
	var parts []string
	for _, s := range []string{fleet.StateCurrent, fleet.StatePending, fleet.StateBehind, fleet.StateFailing, fleet.StateDiverged, fleet.StateUnreachable} {
		if n := rep.Counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	fmt.Fprintf(w, "%d nodes: %s; reference head %s\n", len(rep.Nodes), strings.Join(parts, ", "), printable(rep.Reference))
	if rep.Error != "" {
		fmt.Fprintf(w, "error: %s\n", printable(rep.Error))
	}
}

// printable replaces control characters (and tabs, which would break the
// table) with '?'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if manifests.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

// layerChecks says how a node's layers are checked: "2 layer image(s),
// digest-checked at activation".
func layerChecks(li *schema.LayerIntegrity) string {
	var parts []string
	if li.Images > 0 {
		parts = append(parts, fmt.Sprintf("%d layer image(s), %s", li.Images, li.Mode))
	}
	if li.Directories > 0 {
		parts = append(parts, fmt.Sprintf("%d layer director(ies), checked by the file audit only", li.Directories))
	}
	return strings.Join(parts, "; ")
}

func printStatus(w io.Writer, st *node.Status) {
	backend := st.Backend
	if st.Active != nil {
		backend += map[bool]string{true: " (active)", false: " (not active: run strata activate)"}[*st.Active]
	}
	layers := strings.Join(st.Layers, " ")
	if layers == "" {
		layers = "none"
	}
	fmt.Fprintf(w, "node      %s\nbackend   %s\nline      %s\nimage     %s\nhead      %s (%s)\nlayers    %s\n",
		st.Root, backend, st.Line, st.Image.Version, st.Head.Version, st.Head.Digest, layers)
	if li := st.LayerIntegrity; li != nil && li.Images+li.Directories > 0 {
		fmt.Fprintf(w, "checks    %s\n", layerChecks(li))
	}
	if li := st.LayerIntegrity; li != nil && len(li.Unsigned) > 0 {
		fmt.Fprintf(w, "unsigned  layer(s) %s: the overlay's signed manifest records no layer image (made before strata recorded them), so each is checked against the ledger's record of its apply alone; strata upgrade --compact folds them into a signed image\n", printable(strings.Join(li.Unsigned, " ")))
	}
	if li := st.LayerIntegrity; li != nil && li.Refused != nil {
		fmt.Fprintf(w, "REFUSED   layer %s at activation (%s): %s; the stacks hold only the layers below it\n", printable(li.Refused.Version), printable(li.Refused.Time), printable(li.Refused.Error))
	}
	if r := st.Running; r != nil {
		fmt.Fprintf(w, "running   image %s on root %s (whole-image upgrade)\n", r.Version, strings.ToUpper(st.Slot))
	}
	if ri := st.RootIntegrity; ri != nil {
		if ri.Mode == node.RootVerified {
			fmt.Fprintf(w, "root      %s: kernel-verified, root hash %s, device %s\n", ri.Mode, ri.RootHash, ri.Device)
		} else {
			fmt.Fprintf(w, "root      %s, device %s: %s\n", ri.Mode, ri.Device, ri.Note)
		}
	}
	if u := st.Upgrade; u != nil {
		what := "the next boot tries it"
		switch u.State {
		case node.UpgradeTrial:
			what = "trial boot: committed once healthy (strata upgrade --confirm)"
		case node.UpgradeInterrupted:
			what = "its boot entry never went live, so no boot tries it: strata upgrade drops it and upgrades again, strata upgrade --cancel drops it"
		}
		fmt.Fprintf(w, "upgrade   %s: image %s on root %s, boot entry %s, since %s; %s\n", u.State, u.Image.Version, strings.ToUpper(u.Slot), u.Entry, u.Staged, what)
	}
	if st.Interrupted != "" {
		fmt.Fprintf(w, "interrupted  %s\n", st.Interrupted)
	}
	for _, a := range st.Pending {
		fmt.Fprintf(w, "pending   %s %s (because of %s)\n", a.Action, a.Unit, strings.Join(a.Because, ", "))
	}
	for _, a := range st.Reboot {
		fmt.Fprintf(w, "reboot    %s (%s)\n", a.Unit, strings.Join(a.Because, "; "))
	}
	if h := st.Held; h != nil {
		fmt.Fprintf(w, "held      at %s since %s: %s (strata release --root %s lets it move)\n", h.Head.Version, h.Since, h.Reason, st.Root)
	}
	if f := st.LastFailure; f != nil && f.Slot != "" {
		fmt.Fprintf(w, "failed    upgrade to image %s at %s: %s\n", f.Version, f.Time, f.Error)
	} else if f != nil {
		fmt.Fprintf(w, "failed    %s at %s: %s\n", f.Version, f.Time, f.Error)
	}
	printUnits(w, st.Units, st.UnitsError)
}

// printUnits prints a node's units: how many are current, then each
// one that is not, with what it loaded and what to do.
func printUnits(w io.Writer, units []schema.UnitConfig, unitsErr string) {
	if unitsErr != "" {
		fmt.Fprintf(w, "units     not read: %s\n", unitsErr)
		return
	}
	current := 0
	for _, u := range units {
		if u.Current() {
			current++
		}
	}
	fmt.Fprintf(w, "units     %d in the catalog, %d current\n", len(units), current)
	for _, u := range units {
		if u.Current() {
			continue
		}
		loaded := "loaded: unknown"
		if !u.LoadedAt.IsZero() {
			loaded = fmt.Sprintf("loaded %s (%s)", u.LoadedAt.UTC().Format(time.RFC3339), u.LoadedBy)
		}
		if u.Active != "" && u.Active != "active" {
			loaded = u.Active
		}
		fmt.Fprintf(w, "  %-24s %-10s %s; %s\n", u.Unit, u.State, loaded, u.Note)
	}
}
