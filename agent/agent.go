package agent

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/nodestate/overlayfs"
	"github.com/strata-dev/strata/node"

	// The agent opens its node through the registered backends.
	_ "github.com/strata-dev/strata/internal/nodestate/backends"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
	"github.com/strata-dev/strata/schema"
)

// Options are the settings of an Agent that its configuration file does
// not change.
type Options struct {
	// Root is the node (/ on a running node).
	Root string
	// ConfigPath is the configuration file, read before every poll
	// (default: the node's own, DefaultConfigPath below Root).
	ConfigPath string
	// Base is the configuration the file's settings override: defaults
	// and the command line's.
	Base Config
	// Restarter carries out restart plans (nil: recorded as pending).
	Restarter node.Restarter
	// LockWait is how long an apply waits for the node lock.
	LockWait time.Duration
	// Log receives one line per decision (the journal, under systemd).
	Log func(string)
	// TreeCheckEvery is how often the node's files are compared with its
	// head (default 15 minutes; also after every apply that applied
	// something).
	TreeCheckEvery time.Duration
}

// Agent polls a repository and applies what the node is missing.
type Agent struct {
	o       Options
	wake    chan struct{}
	metrics *metrics

	mu       sync.Mutex
	state    schema.AgentState
	store    repo.Poller
	storeFor string
	// good is the last configuration that loaded: a broken edit of the
	// file does not stop the node following its line (see cycle).
	good     *Config
	retry    bool // the last apply failed: try again even if the index did not change
	failures int
	lastTree time.Time
	nudged   time.Time // time of the newest nudge taken

	healthMu sync.Mutex // one reading of the node's health at a time
	health   *schema.Health
	healthAt time.Time

	refusedLogged time.Time // refused nudges are logged at most every 10s
	refusedQuiet  int       // refused since

	idMu sync.Mutex
	id   *sign.Key // the node's identity key, once read (see identity)
}

// New returns an agent for the node at o.Root.
func New(o Options) *Agent {
	if o.Log == nil {
		o.Log = func(string) {}
	}
	if o.TreeCheckEvery <= 0 {
		o.TreeCheckEvery = 15 * time.Minute
	}
	a := &Agent{o: o, wake: make(chan struct{}, 1)}
	a.metrics = newMetrics(a)
	return a
}

// State returns a copy of the agent's state.
func (a *Agent) State() schema.AgentState {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.state
	if !st.UnreachableSince.IsZero() {
		st.UnreachableSeconds = time.Since(st.UnreachableSince).Seconds()
	}
	return st
}

// Wake makes the agent poll now instead of at its next poll time.
func (a *Agent) Wake() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Run polls and applies until ctx is done; it returns nil then. Nothing a
// poll or an apply meets stops it.
func (a *Agent) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		a.listenNudges(ctx)
	}()
	defer func() { <-listening }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-a.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		wait := a.cycle(ctx)
		// An agent idles between polls nearly all its life: what a
		// cycle allocated (manifests, an apply's buffers) goes back to
		// the kernel now rather than when the runtime's background
		// scavenger gets to it, at the cost of one collection a poll
		// (0.6 MiB less resident per agent, docs/benchmarks.md).
		debug.FreeOSMemory()
		if ctx.Err() != nil {
			return nil
		}
		a.mu.Lock()
		a.state.NextPoll = time.Now().Add(wait)
		a.mu.Unlock()
		timer.Reset(wait)
	}
}

// cycle reads the configuration, polls, applies when there is something
// to apply, and returns how long to wait before the next cycle.
func (a *Agent) cycle(ctx context.Context) time.Duration {
	cfg, err := a.loadConfig()
	stale := false
	if err != nil {
		wait := a.configFailed(err)
		a.mu.Lock()
		good := a.good
		a.mu.Unlock()
		if good == nil {
			return wait
		}
		// A broken edit does not stop the node following its line: it
		// polls and applies on with the last configuration that was good,
		// and says so, until the file is fixed.
		cfg, stale = *good, true
	}
	a.mu.Lock()
	if a.store == nil || a.storeFor != cfg.Repo {
		st, lerr := repo.Locate(cfg.Repo)
		if lerr != nil { // validate checked it; a race with an edit
			a.mu.Unlock()
			return a.configFailed(lerr)
		}
		p, ok := st.(repo.Poller)
		if !ok {
			a.mu.Unlock()
			return a.configFailed(fmt.Errorf("repo %s cannot be polled", cfg.Repo))
		}
		a.store, a.storeFor, a.retry = p, cfg.Repo, true
	}
	if !stale {
		if !a.state.ConfigValid {
			a.o.Log("config ok: polling " + cfg.Repo)
		}
		a.state.Config, a.state.ConfigValid, a.state.Repo = "ok", true, cfg.Repo
		good := cfg
		a.good = &good
	}
	st, retry := a.store, a.retry
	a.mu.Unlock()
	if !stale {
		a.metrics.configValid.Set(1)
	}

	pctx, cancel := context.WithTimeout(ctx, PollTimeout)
	changed, err := st.Poll(pctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		a.metrics.polls.WithLabelValues("error").Inc()
		a.o.Log(fmt.Sprintf("poll of %s failed: %v", cfg.Repo, err))
		a.mu.Lock()
		a.state.LastPollError = err.Error()
		if a.state.UnreachableSince.IsZero() {
			a.state.UnreachableSince = time.Now()
		}
		a.mu.Unlock()
		return a.failed(cfg)
	}
	result := "unchanged"
	if changed {
		result = "changed"
	}
	a.metrics.polls.WithLabelValues(result).Inc()
	a.mu.Lock()
	a.state.LastPoll, a.state.LastPollError, a.state.UnreachableSince = time.Now(), "", time.Time{}
	a.mu.Unlock()
	if !changed && !retry {
		wait := a.succeeded(cfg)
		a.checkTree(ctx, false)
		return wait
	}
	actx, cancel := context.WithTimeout(ctx, ApplyTimeout)
	applied, ok := a.apply(actx, cfg, st)
	cancel()
	if ok {
		wait := a.succeeded(cfg)
		a.checkTree(ctx, applied > 0)
		return wait
	}
	if ctx.Err() != nil {
		return 0
	}
	return a.failed(cfg)
}

// The bounds of one cycle: a poll, and an apply (which holds the node
// lock), are given up when they take longer, whatever the server does.
const (
	PollTimeout  = 2 * time.Minute
	ApplyTimeout = 30 * time.Minute
)

// open opens the agent's node, with its restarter, lock wait and log.
func (a *Agent) open() (*node.Node, error) {
	return node.Open(a.o.Root, node.Options{Restarter: a.o.Restarter, LockWait: a.o.LockWait, Progress: a.o.Log})
}

// apply applies what the node is missing and reports how many overlays
// it applied and whether it worked.
func (a *Agent) apply(ctx context.Context, cfg Config, st repo.Store) (int, bool) {
	res := &schema.ApplyResult{Time: time.Now()}
	var rep *node.ApplyReport
	n, err := a.open()
	if err == nil {
		rep, err = n.Apply(ctx, node.Source{Repo: cfg.Repo, Store: st, Channel: cfg.Channel}, node.ApplyOptions{Force: cfg.OverwriteLocalEdits})
	}
	if rep != nil {
		res.From, res.To = rep.From.Version, rep.To.Version
		for _, p := range rep.Plans {
			if !p.AlreadyApplied && p.Version != "" && manifests.CompareVersions(p.Version, rep.From.Version) > 0 && manifests.CompareVersions(p.Version, rep.To.Version) <= 0 {
				res.Applied++
				for _, act := range p.Actions {
					if act.Unit != "" {
						res.Units = append(res.Units, string(act.Action)+" "+act.Unit)
					}
				}
			}
		}
	}
	a.metrics.applied.Add(float64(res.Applied))
	if errors.Is(err, node.ErrHeld) {
		// An operator's decision, not a failure: no backoff, and every
		// cycle asks again, so a release takes effect at the next one.
		res.Result, res.Reason, res.Error = "held", "held", err.Error()
		a.mu.Lock()
		if prev := a.state.LastApply; prev == nil || prev.Result != "held" {
			a.o.Log("not applying: " + err.Error())
		}
		a.state.LastApply, a.retry = res, true
		a.mu.Unlock()
		return 0, true
	}
	if err != nil {
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return res.Applied, false // stopping
		}
		res.Result, res.Reason, res.Error = "failed", Reason(err), err.Error()
		a.metrics.failures.WithLabelValues(res.Reason).Inc()
		a.o.Log(fmt.Sprintf("apply from %s failed (%s): %v", cfg.Repo, res.Reason, err))
	} else {
		res.Result = "ok"
		if res.Applied > 0 {
			a.o.Log(fmt.Sprintf("applied %d overlays from %s: %s -> %s", res.Applied, cfg.Repo, res.From, res.To))
		} else {
			a.o.Log(fmt.Sprintf("node is at the head of %s (%s)", cfg.Repo, res.To))
		}
	}
	a.mu.Lock()
	a.state.LastApply = res
	a.retry = err != nil
	a.mu.Unlock()
	return res.Applied, err == nil
}

// checkTree compares the node's files with its head after an apply, and
// otherwise every TreeCheckEvery.
func (a *Agent) checkTree(ctx context.Context, now bool) {
	a.mu.Lock()
	due := now || time.Since(a.lastTree) >= a.o.TreeCheckEvery
	a.mu.Unlock()
	if !due {
		return
	}
	n, err := a.open()
	var au *schema.Audit
	if err == nil {
		au, err = n.Verify(ctx, node.VerifyOptions{Files: true})
	}
	if err != nil {
		a.o.Log(fmt.Sprintf("checking the node's files: %v", err))
		return
	}
	ok := au.OK()
	a.mu.Lock()
	a.lastTree = time.Now()
	a.state.TreeMatches, a.state.TreeChecked = &ok, a.lastTree
	a.mu.Unlock()
	if !ok {
		a.o.Log("the node's files do not match its head; see strata verify-sequence --files")
	}
}

func (a *Agent) configFailed(err error) time.Duration {
	a.mu.Lock()
	var msg string
	switch {
	case errors.Is(err, ErrNotConfigured):
		// Taken away on purpose: the node stops following.
		msg, a.good = "not configured: "+strings.TrimSuffix(err.Error(), ": "+ErrNotConfigured.Error()), nil
	case a.good != nil:
		msg = "config invalid: " + err.Error() + "; following " + a.good.Repo + " with the last good config until the file is fixed"
	default:
		msg = "config invalid: " + err.Error() + "; not polling until the file is fixed"
	}
	if a.state.Config != msg {
		a.o.Log(msg)
	}
	a.state.Config, a.state.ConfigValid = msg, false
	a.mu.Unlock()
	a.metrics.configValid.Set(0)
	// The file is read again soon: a fix takes effect by itself.
	wait := time.Duration(a.o.Base.Interval)
	if wait <= 0 {
		wait = DefaultInterval
	}
	return min(wait, 30*time.Second)
}

func (a *Agent) succeeded(cfg Config) time.Duration {
	a.mu.Lock()
	a.failures, a.state.Failures = 0, 0
	a.mu.Unlock()
	return jittered(time.Duration(cfg.Interval), cfg.Jitter)
}

// failed counts a failure and returns the backoff: the interval doubled
// per consecutive failure, up to max_backoff, with jitter.
func (a *Agent) failed(cfg Config) time.Duration {
	a.mu.Lock()
	a.failures++
	a.state.Failures = a.failures
	n := a.failures
	a.mu.Unlock()
	wait := time.Duration(cfg.Interval)
	for i := 1; i < n && wait < time.Duration(cfg.MaxBackoff); i++ {
		wait *= 2
	}
	return jittered(min(wait, time.Duration(cfg.MaxBackoff)), cfg.Jitter)
}

// jittered varies d by up to p percent either way, so a fleet does not
// poll in step.
func jittered(d time.Duration, p Percent) time.Duration {
	if p <= 0 || d <= 0 {
		return d
	}
	span := int64(float64(d) * float64(p) / 100)
	if span <= 0 {
		return d
	}
	return d + time.Duration(rand.Int64N(2*span+1)-span)
}

// Reason classifies an apply or poll error for metrics and health.
func Reason(err error) string {
	switch {
	case errors.Is(err, manifests.ErrIndexRollback):
		return "index_rollback"
	case errors.Is(err, manifests.ErrIndexExpired):
		return "index_expired"
	case errors.Is(err, nodestate.ErrLocked):
		return "locked"
	case errors.Is(err, node.ErrRestart):
		return "restart"
	case errors.Is(err, node.ErrValidation):
		return "validation"
	case errors.Is(err, node.ErrLocalEdit):
		return "local_edit"
	case errors.Is(err, overlayfs.ErrLayerRefused):
		return "layer_refused"
	case errors.Is(err, sign.ErrBadSignature), errors.Is(err, sign.ErrUnsigned), errors.Is(err, sign.ErrNoKeys):
		return "signature"
	case errors.Is(err, overlay.ErrSequence):
		return "sequence"
	case errors.Is(err, repo.ErrTampered), errors.Is(err, overlay.ErrPayload):
		return "tampered"
	case errors.Is(err, overlay.ErrConstraint):
		return "constraint"
	case errors.Is(err, manifests.ErrRejected):
		return "rejected"
	}
	return "error"
}

// loadConfig reads the agent's configuration: Options.ConfigPath, else
// the node's own.
func (a *Agent) loadConfig() (Config, error) {
	if a.o.ConfigPath != "" {
		return LoadConfig(a.o.ConfigPath, a.o.Base)
	}
	root := a.o.Root
	if root == "" {
		root = "/"
	}
	return LoadConfigIn(root, a.o.Base)
}
