package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/strata-dev/strata/internal/nudge"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/schema"
)

// Transfer is how overlays reach nodes: pulled from a URL or sent over
// SSH as a bundle.
type Transfer struct {
	// URL, when set, is the repository's URL as the nodes reach it: they
	// fetch the overlays themselves (--repo URL on the node).
	URL string
	// Bundle, used when URL is empty, writes a bundle of line's overlays
	// after version from through version to into a new file and returns
	// its path (repo.WriteBundle); it is sent on the command's stdin
	// (--bundle - on the node).
	Bundle func(ctx context.Context, line, from, to string) (string, error)
}

// source returns the node-side arguments that name the overlays of line
// after from through to, and the stdin to send (to close), writing the
// bundle once per (from, to) through cache.
func (t Transfer) source(ctx context.Context, cache *bundleCache, line, from, to string) ([]string, io.ReadCloser, error) {
	if t.URL != "" {
		return []string{"--repo", t.URL}, nil, nil
	}
	path, err := cache.get(ctx, line, from, to)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	return []string{"--bundle", "-"}, f, nil
}

// RolloutOptions are the settings of Rollout.
type RolloutOptions struct {
	WaveOptions
	// SSH reaches the nodes.
	SSH *SSH
	// LineName and Line are the repository's line: its name and its
	// elements, image first (repo.LineVersions).
	LineName string
	Line     []manifests.Ref
	// Target is the version every node is brought to (one of Line).
	Target string
	// Transfer is how the overlays reach the nodes.
	Transfer
	// Nudge, when set, updates the nodes through their agents instead
	// of SSH: each gets a nudge Nudge signs just before it is sent (an
	// agent refuses one older than a few minutes) and applies its
	// repository's head itself (Target must be the line's head); the
	// inventory must give every node's health URL, and its agent's base
	// URL (the health URL's scheme and host) takes the nudge.
	Nudge func() (*nudge.Nudge, error)
}

// RolloutReport is what a rollout did.
type RolloutReport struct {
	Line   string       `json:"line"`
	Target string       `json:"target"`
	Nodes  []NodeResult `json:"nodes"`
	// Counts by outcome.
	Counts map[string]int `json:"counts"`
	// Halted says why the rollout stopped before its last wave.
	Halted string `json:"halted,omitempty"`
}

// ErrNotAtTarget reports a rollout or restart that left some node not
// done: failed, unreachable or skipped.
var ErrNotAtTarget = manifests.Rejection("not every node is done")

// Err returns ErrNotAtTarget with the counts when some node is not at the
// target, else nil.
func (r *RolloutReport) Err() error { return outcomeErr(r.Counts, len(r.Nodes), r.Halted) }

func outcomeErr(c map[string]int, total int, halted string) error {
	if c[OutcomeFailed]+c[OutcomeUnreachable]+c[OutcomeSkipped] == 0 {
		return nil
	}
	msg := fmt.Sprintf("%d failed, %d unreachable, %d skipped of %d", c[OutcomeFailed], c[OutcomeUnreachable], c[OutcomeSkipped], total)
	if halted != "" {
		msg += "; " + halted
	}
	return fmt.Errorf("%w: %s", ErrNotAtTarget, msg)
}

// Rollout brings every node to o.Target. It first asks each node for its
// health over SSH (in parallel): a node that cannot be reached is
// unreachable, one on another line or at a head the line does not have
// failed, one at the target current (a rerun converges: they are left
// alone). The others are updated in waves, the canaries first: each node
// applies the pending overlays (apply-overlay verifies and restarts as
// on any node) and then must report the target in its health (its
// agent's URL, else over SSH) within HealthTimeout. A wave in which a node
// failed is the last: the nodes of later waves are skipped and the report
// says where the rollout halted. No node is ever left out of the report.
func Rollout(ctx context.Context, nodes []Node, o RolloutOptions) (*RolloutReport, error) {
	at := refIndex(o.Line, o.Target)
	if at < 0 {
		return nil, fmt.Errorf("rollout: version %s is not in line %s: %w", o.Target, o.LineName, ErrNotAtTarget)
	}
	viaAgent := o.Nudge != nil
	switch {
	case viaAgent && at != len(o.Line)-1:
		return nil, fmt.Errorf("rollout via the agents: they apply their repository's head, %s, not %s", o.Line[len(o.Line)-1].Version, o.Target)
	case viaAgent:
	case o.SSH == nil:
		return nil, errors.New("rollout: no SSH settings")
	case o.URL == "" && o.Bundle == nil:
		return nil, errors.New("rollout: neither a repository URL nor a bundle writer")
	}
	if !viaAgent {
		if err := o.SSH.Prepare(); err != nil {
			return nil, err
		}
	}
	progress := o.setDefaults()
	rep := &RolloutReport{Line: o.LineName, Target: o.Target, Nodes: make([]NodeResult, len(nodes))}
	var healths []probed
	if viaAgent {
		healths = probeAgents(ctx, nodes, o.HTTP)
	} else {
		healths = probe(ctx, nodes, o.SSH)
	}
	heads := make([]string, len(nodes))
	for i, n := range nodes {
		rep.Nodes[i] = NodeResult{Name: n.Name}
		r, h := &rep.Nodes[i], healths[i]
		if h.err != nil {
			r.Outcome, r.Error = OutcomeUnreachable, h.err.Error()
			continue
		}
		r.From, heads[i] = h.Head.Version, h.Head.Version
		switch j := refIndex(o.Line, h.Head.Version); {
		case h.Line != o.LineName:
			r.Outcome, r.Error = OutcomeFailed, fmt.Sprintf("on line %q, not %q", h.Line, o.LineName)
		case j < 0 || o.Line[j].Digest != h.Head.Digest:
			r.Outcome, r.Error = OutcomeFailed, fmt.Sprintf("head %s (%s) is not in the repository's line", h.Head.Version, h.Head.Digest)
		case j == at:
			r.Outcome, r.To = OutcomeCurrent, h.Head.Version
		case h.Held != nil:
			r.Outcome, r.Error = OutcomeSkipped, fmt.Sprintf("held at %s since %s: %s (strata release --root %s lets it follow)", h.Held.Head.Version, h.Held.Since, h.Held.Reason, h.Root)
		case j > at:
			r.Outcome, r.Error = OutcomeFailed, fmt.Sprintf("head %s is past the target %s (rollout never goes back: use rollback on the node)", h.Head.Version, o.Target)
		}
	}
	var todo []int
	unreachable := 0
	for i, r := range rep.Nodes {
		switch r.Outcome {
		case "":
			todo = append(todo, i)
		case OutcomeUnreachable:
			unreachable++
			progress(fmt.Sprintf("%s: unreachable: %s", r.Name, r.Error))
		case OutcomeFailed:
			progress(fmt.Sprintf("%s: %s", r.Name, r.Error))
		case OutcomeSkipped:
			progress(fmt.Sprintf("%s: skipped: %s", r.Name, r.Error))
		}
	}
	bundles := &bundleCache{write: o.Bundle}
	defer bundles.remove()
	step := func(ctx context.Context, i int) {
		r := &rep.Nodes[i]
		if viaAgent {
			r.Outcome, r.To, r.Error, r.Units = nudgeNode(ctx, nodes[i], heads[i], agentApply(healths[i].Health), o)
		} else {
			r.Outcome, r.To, r.Error, r.Units = applyNode(ctx, nodes[i], heads[i], o, bundles)
		}
		if r.Outcome == OutcomeUpdated {
			progress(fmt.Sprintf("%s: %s -> %s", r.Name, r.From, r.To))
		} else {
			progress(fmt.Sprintf("%s: %s: %s", r.Name, r.Outcome, r.Error))
		}
	}
	rep.Halted = runWaves(ctx, rep.Nodes, todo, o.WaveOptions, unreachable, step, progress)
	rep.Counts = countOutcomes(rep.Nodes)
	return rep, nil
}

// applyNode applies the pending overlays on n (at head from) over SSH and
// waits for its health to report the target. It returns the outcome, the
// node's head after, the reason and the units acted on.
func applyNode(ctx context.Context, n Node, from string, o RolloutOptions, bundles *bundleCache) (outcome, to, reason string, units []string) {
	se, err := o.SSH.dial(ctx, n)
	if err != nil {
		return OutcomeUnreachable, "", err.Error(), nil
	}
	defer se.Close()
	argv := []string{o.SSH.Strata, "apply-overlay", "--root", "/", "--json", "--through", o.Target}
	more, stdin, err := o.Transfer.source(ctx, bundles, o.LineName, from, o.Target)
	if err != nil {
		return OutcomeFailed, from, err.Error(), nil
	}
	if stdin != nil {
		defer stdin.Close()
	}
	argv = append(argv, more...)
	out, err := se.run(ctx, stdin, argv...)
	var ee *ExitError
	switch {
	case errors.As(err, &ee):
		// With --json a failed apply still reports how far it got: the
		// overlays before the failing one are committed.
		to := from
		var ar node.ApplyReport
		if json.Unmarshal(out, &ar) == nil && ar.To.Version != "" {
			to = ar.To.Version
		}
		return OutcomeFailed, to, "apply-overlay: " + ee.Error(), nil
	case err != nil && ctx.Err() != nil:
		return OutcomeFailed, from, "apply-overlay interrupted: the node may have applied the overlays or not: check it with strata status", nil
	case err != nil:
		// The session broke: the node may or may not have changed.
		return OutcomeFailed, from, fmt.Sprintf("apply-overlay: %v (the node's state is unknown: check it with strata status)", err), nil
	}
	var ar node.ApplyReport
	if err := manifests.Unmarshal(out, &ar); err != nil {
		return OutcomeFailed, from, fmt.Sprintf("apply-overlay: unreadable report: %v", err), nil
	}
	for _, p := range ar.Plans {
		for _, a := range p.Actions {
			if a.Unit != "" {
				units = append(units, string(a.Action)+" "+a.Unit)
			}
		}
	}
	if err := waitHealthy(ctx, se, n, o.Line[refIndex(o.Line, o.Target)], o.LineName, o.HealthTimeout, o.HTTP); err != nil {
		return OutcomeFailed, ar.To.Version, err.Error(), units
	}
	return OutcomeUpdated, o.Target, "", units
}

// waitHealthy polls n's health (its agent's URL, else strata health over
// se) until it reports head want on line lineName, not failing, or
// timeout passes.
func waitHealthy(ctx context.Context, se *session, n Node, want manifests.Ref, lineName string, timeout time.Duration, http StatusOptions) error {
	_, err := waitHealthySince(ctx, se, n, want, lineName, timeout, http, nil)
	return err
}

// waitHealthySince is waitHealthy that also stops at once when the node's
// agent reports a failed apply other than prev, the last one it reported
// before the nudge: a nudged agent that took the overlays back. It
// returns the last health it read (nil if none).
func waitHealthySince(ctx context.Context, se *session, n Node, want manifests.Ref, lineName string, timeout time.Duration, http StatusOptions, prev *schema.ApplyResult) (*schema.Health, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	var seen *schema.Health
	for {
		var h *schema.Health
		var err error
		if n.Health != "" {
			h, _, err = fetchHealth(ctx, http, n)
		} else {
			h, _, err = se.health(ctx)
		}
		if err == nil {
			seen = h
		}
		if a := agentApply(h); err == nil && a != nil && a.Result != "ok" && h.Head != want && (prev == nil || !a.Time.Equal(prev.Time)) {
			return seen, fmt.Errorf("the agent's apply failed: %s %s", a.Reason, a.Error)
		}
		if err == nil {
			row := NodeStatus{Name: n.Name, Behind: -1}
			judge(&row, h, want.Version, StatusOptions{LineName: lineName})
			switch {
			case h.Head != want:
				err = fmt.Errorf("health reports head %s (%s), not %s", h.Head.Version, h.Head.Digest, want.Version)
			case row.State == StateFailing || row.State == StateDiverged:
				err = fmt.Errorf("health: %s %s", row.State, row.LastFailure+row.Error)
			default:
				return seen, nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded && timeout > 0 {
				return seen, fmt.Errorf("%s %s (or --node-timeout ran out): %v", healthTimedOut, timeout, last)
			}
			if ctx.Err() == context.Canceled {
				return seen, fmt.Errorf("interrupted while waiting for its health to report %s", want.Version)
			}
			return seen, fmt.Errorf("waiting for health: %w: %v", ctx.Err(), last)
		case <-time.After(time.Second):
		}
	}
}

// nudgeNode nudges n's agent and waits until its health reports the
// target. It returns the outcome, the head after, the reason and the
// restarts and reloads the agent's apply planned (its last apply).
func nudgeNode(ctx context.Context, n Node, from string, prev *schema.ApplyResult, o RolloutOptions) (outcome, to, reason string, units []string) {
	u, err := url.Parse(n.Health)
	if err != nil || n.Health == "" {
		return OutcomeFailed, from, "no agent health URL in the inventory", nil
	}
	base := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/"}).String()
	nd, err := o.Nudge()
	if err != nil {
		return OutcomeFailed, from, fmt.Sprintf("signing the nudge: %v", err), nil
	}
	if err := nudge.Send(ctx, base, nd); err != nil {
		if errors.Is(err, nudge.ErrRefused) {
			return OutcomeFailed, from, err.Error(), nil
		}
		return OutcomeUnreachable, from, err.Error(), nil
	}
	h, err := waitHealthySince(ctx, nil, n, o.Line[refIndex(o.Line, o.Target)], o.LineName, o.HealthTimeout, o.HTTP, prev)
	if a := agentApply(h); a != nil {
		units = a.Units
	}
	if err != nil {
		to := from
		if h != nil {
			to = h.Head.Version
		}
		return OutcomeFailed, to, err.Error(), units
	}
	return OutcomeUpdated, o.Target, "", units
}

// agentApply is the agent's last apply in h, if any.
func agentApply(h *schema.Health) *schema.ApplyResult {
	if h == nil {
		return nil
	}
	return h.Agent.LastApply
}

// probeAgents reads every node's health from its agent.
func probeAgents(ctx context.Context, nodes []Node, o StatusOptions) []probed {
	out := make([]probed, len(nodes))
	each(len(nodes), o.Parallel, func(i int) {
		if nodes[i].Health == "" {
			out[i] = probed{nil, errors.New("no agent health URL in the inventory")}
			return
		}
		h, _, err := fetchHealth(ctx, o, nodes[i])
		out[i] = probed{h, err}
	})
	return out
}

// probed is a node's health, or why it could not be read.
type probed struct {
	*schema.Health
	err error
}

// probe reads every node's health over SSH, 64 at a time.
func probe(ctx context.Context, nodes []Node, s *SSH) []probed {
	out := make([]probed, len(nodes))
	each(len(nodes), 64, func(i int) {
		h, _, err := sshHealth(ctx, s, nodes[i], s.Timeout+30*time.Second)
		out[i] = probed{h, err}
	})
	return out
}

// refIndex is the index of version v in line, or -1.
func refIndex(line []manifests.Ref, v string) int {
	for i, r := range line {
		if r.Version == v {
			return i
		}
	}
	return -1
}

// bundleCache writes one bundle per (from, to), once, shared by the nodes
// that need it (concurrent requests wait for the one writing it).
type bundleCache struct {
	write func(ctx context.Context, line, from, to string) (string, error)
	once  singleflight.Group
	mu    sync.Mutex
	paths map[string]string
	errs  map[string]error // failures (not interruptions) are not retried
}

func (b *bundleCache) get(ctx context.Context, line, from, to string) (string, error) {
	key := from + " " + to
	v, err, _ := b.once.Do(key, func() (any, error) {
		b.mu.Lock()
		p, ok := b.paths[key]
		err := b.errs[key]
		b.mu.Unlock()
		if ok || err != nil {
			return p, err
		}
		p, err = b.write(ctx, line, from, to)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.paths == nil {
			b.paths, b.errs = map[string]string{}, map[string]error{}
		}
		if err != nil {
			err = fmt.Errorf("writing the bundle of %s from %s through %s: %w", line, from, to, err)
			if ctx.Err() == nil {
				b.errs[key] = err
			}
			return "", err
		}
		b.paths[key] = p
		return p, nil
	})
	return v.(string), err
}

func (b *bundleCache) remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.paths {
		os.Remove(p)
	}
}
