package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
)

// RestartOptions are the settings of Restart.
type RestartOptions struct {
	WaveOptions
	// SSH reaches the nodes.
	SSH *SSH
	// Units are the units to restart on every node (default: each
	// node's managed services).
	Units []string
	// Repair restores each node's drifted files first (strata restart
	// --repair), with the node's overlays coming by Transfer.
	Repair bool
	Transfer
}

// RestartReport is what a cluster restart did.
type RestartReport struct {
	Units  []string       `json:"units,omitempty"`
	Nodes  []NodeResult   `json:"nodes"`
	Counts map[string]int `json:"counts"`
	Halted string         `json:"halted,omitempty"`
}

// Err returns ErrNotAtTarget with the counts unless every node restarted.
func (r *RestartReport) Err() error { return outcomeErr(r.Counts, len(r.Nodes), r.Halted) }

// Restart restarts the managed services (or o.Units) of every node over
// SSH in rolling waves: each node runs strata restart --root /, which
// restarts only running units and checks them, and its health must then
// show the same head, not failing. Unreachable nodes are named and count
// against MaxUnavailable; a wave with a failure is the last.
func Restart(ctx context.Context, nodes []Node, o RestartOptions) (*RestartReport, error) {
	if o.SSH == nil {
		return nil, errors.New("restart: no SSH settings")
	}
	if err := o.SSH.Prepare(); err != nil {
		return nil, err
	}
	for _, u := range o.Units {
		if !manifests.ValidUnit(u) {
			return nil, fmt.Errorf("restart: %q is not a unit name", u)
		}
	}
	progress := o.setDefaults()
	rep := &RestartReport{Units: o.Units, Nodes: make([]NodeResult, len(nodes))}
	if o.Repair && o.URL == "" && o.Bundle == nil {
		return nil, errors.New("restart --repair: neither a repository URL nor a bundle writer")
	}
	bundles := &bundleCache{write: o.Bundle}
	defer bundles.remove()
	healths := probe(ctx, nodes, o.SSH)
	var todo []int
	unreachable := 0
	for i, n := range nodes {
		rep.Nodes[i] = NodeResult{Name: n.Name}
		if err := healths[i].err; err != nil {
			rep.Nodes[i].Outcome, rep.Nodes[i].Error = OutcomeUnreachable, err.Error()
			unreachable++
			progress(fmt.Sprintf("%s: unreachable: %v", n.Name, err))
			continue
		}
		rep.Nodes[i].From = healths[i].Head.Version
		todo = append(todo, i)
	}
	step := func(ctx context.Context, i int) {
		r := &rep.Nodes[i]
		h := healths[i]
		r.Outcome, r.Error, r.Units, r.Repaired = restartNode(ctx, nodes[i], h, o, bundles)
		r.To = r.From
		if r.Outcome == OutcomeRestarted {
			progress(fmt.Sprintf("%s: restarted %v", r.Name, r.Units))
		} else {
			progress(fmt.Sprintf("%s: %s: %s", r.Name, r.Outcome, r.Error))
		}
	}
	rep.Halted = runWaves(ctx, rep.Nodes, todo, o.WaveOptions, unreachable, step, progress)
	rep.Counts = countOutcomes(rep.Nodes)
	return rep, nil
}

// restartNode runs strata restart on n (with health h) and waits for its
// health; it returns the outcome, the reason, the units acted on and the
// layers a repair rebuilt.
func restartNode(ctx context.Context, n Node, h probed, o RestartOptions, bundles *bundleCache) (outcome, reason string, units, repaired []string) {
	se, err := o.SSH.dial(ctx, n)
	if err != nil {
		return OutcomeUnreachable, err.Error(), nil, nil
	}
	defer se.Close()
	argv := []string{o.SSH.Strata, "restart", "--root", "/", "--json"}
	for _, u := range o.Units {
		argv = append(argv, "--unit", u)
	}
	var stdin io.Reader
	// A node with no overlay applied has no layer that could drift: its
	// tree is its read-only image.
	if o.Repair && h.Head.Version != h.Image.Version {
		// The bundle holds every overlay the node applied.
		more, in, err := o.Transfer.source(ctx, bundles, h.Line, h.Image.Version, h.Head.Version)
		if err != nil {
			return OutcomeFailed, err.Error(), nil, nil
		}
		if in != nil {
			defer in.Close()
			stdin = in
		}
		argv = append(append(argv, "--repair"), more...)
	}
	out, err := se.run(ctx, stdin, argv...)
	var ee *ExitError
	switch {
	case errors.As(err, &ee):
		return OutcomeFailed, "restart: " + ee.Error(), nil, nil
	case err != nil:
		return OutcomeFailed, fmt.Sprintf("restart: %v (whether its units restarted is unknown)", err), nil, nil
	}
	var rr node.RestartReport
	if err := manifests.Unmarshal(out, &rr); err != nil {
		return OutcomeFailed, fmt.Sprintf("restart: unreadable report: %v", err), nil, nil
	}
	for _, a := range rr.Restarted {
		units = append(units, string(a.Action)+" "+a.Unit)
	}
	if rr.Repair != nil {
		repaired = rr.Repair.Layers
	}
	if err := waitHealthy(ctx, se, n, h.Head, h.Line, o.HealthTimeout, o.HTTP); err != nil {
		return OutcomeFailed, err.Error(), units, repaired
	}
	return OutcomeRestarted, "", units, repaired
}
