package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/schema"
)

// Node states a status reports, worst last.
const (
	StateCurrent     = "current"
	StatePending     = "pending"  // at the head, restarts or reloads owed
	StateHeld        = "held"     // held where it is (a rollback, strata hold): nothing moves it
	StateBehind      = "behind"   // an older head than the reference
	StateFailing     = "failing"  // the last apply failed, or the agent's config is invalid
	StateDiverged    = "diverged" // another line, or a head the repository's line does not have
	StateUnreachable = "unreachable"
)

// maxHealth bounds a health response.
const maxHealth = 4 << 20

// NodeStatus is one node's line of a fleet status.
type NodeStatus struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Head is the node's head version ("" when unreachable).
	Head string `json:"head,omitempty"`
	// Behind is how many overlays the node lacks to reach the
	// reference head (-1: unknown, when no repository was given).
	Behind int `json:"behind"`
	// ConfigMatches is 1 when every managed config file on disk is the
	// head's and no service owes a restart or reload (it runs with the
	// config on disk), else 0.
	ConfigMatches int `json:"config_matches"`
	// Newest is the newest modification time among its managed configs.
	Newest time.Time `json:"newest_config,omitzero"`
	// ConfigDigest is the digest of the node's managed config on disk,
	// LoadedAt when its units last loaded config (the newest load).
	ConfigDigest string    `json:"config_digest,omitempty"`
	LoadedAt     time.Time `json:"loaded_at,omitzero"`
	// Note says, for a node that is not current and has no failure or
	// error to show, which unit or file is why and what to do.
	Note        string `json:"note,omitempty"`
	Pending     int    `json:"pending_restarts"`
	LastFailure string `json:"last_failure,omitempty"`
	// Skew is the node's clock minus this host's, from the health
	// response's Date header (zero when unknown).
	Skew time.Duration `json:"clock_skew_ns"`
	// Identity is the identity key the node's health names (to pin in
	// the inventory), and whether the answer was verified with the key
	// the inventory pins.
	Identity string `json:"identity,omitempty"`
	Verified bool   `json:"identity_verified"`
	Error    string `json:"error,omitempty"`
}

// Notes is what the NOTE column shows: the node's error, else its last
// failure, else why it is not current.
func (n NodeStatus) Notes() string {
	switch {
	case n.Error != "":
		return n.Error
	case n.LastFailure != "":
		return n.LastFailure
	}
	return n.Note
}

// Report is a fleet status.
type Report struct {
	// Reference is the head every node is compared with: the
	// repository's, or else the newest any node reports.
	Reference string       `json:"reference"`
	Nodes     []NodeStatus `json:"nodes"`
	// Counts by state.
	Counts map[string]int `json:"counts"`
	// Error says why the reference is not the repository's head when a
	// repository was asked for and could not be read.
	Error string `json:"error,omitempty"`
}

// ErrNotCurrent reports a fleet where some node is behind, failing or
// unreachable.
var ErrNotCurrent = manifests.Rejection("not every node is at the head")

// Err returns ErrNotCurrent, naming how many nodes are behind, failing or
// unreachable, or nil when none is (nodes owing restarts do not count).
func (r *Report) Err() error {
	bad := r.Counts[StateBehind] + r.Counts[StateFailing] + r.Counts[StateDiverged] + r.Counts[StateUnreachable]
	if bad == 0 && r.Error == "" {
		return nil
	}
	if r.Error != "" {
		return fmt.Errorf("%w: %s", ErrNotCurrent, r.Error)
	}
	return fmt.Errorf("%w: %d behind, %d failing, %d diverged, %d unreachable of %d", ErrNotCurrent, r.Counts[StateBehind], r.Counts[StateFailing], r.Counts[StateDiverged], r.Counts[StateUnreachable], len(r.Nodes))
}

// StatusOptions are the settings of Status.
type StatusOptions struct {
	// Client fetches health (default: an http.Client with Timeout).
	Client *http.Client
	// Timeout bounds each node's request (default 5s).
	Timeout time.Duration
	// Parallel is how many nodes are asked at once (default 64).
	Parallel int
	// Line is the line to compare with, its elements (image first) as a
	// repository's index lists them, and LineName its name: nodes must
	// be on it, at one of its elements, and Status counts how far behind
	// each is. Empty: the newest head any node reports is the reference.
	Line     []manifests.Ref
	LineName string
	// Now is this host's clock (default time.Now).
	Now func() time.Time
	// SSH, when set, reaches the nodes that have no health URL: their
	// health is what strata health prints there.
	SSH *SSH
}

// Status asks every node's agent for its health (over SSH, with o.SSH,
// for nodes without a health URL) and reports each node: current, owing
// restarts, behind, failing or unreachable, never leaving one out.
func Status(ctx context.Context, nodes []Node, o StatusOptions) *Report {
	o.setDefaults()
	healths := make([]*schema.Health, len(nodes))
	rows := make([]NodeStatus, len(nodes))
	each(len(nodes), o.Parallel, func(i int) {
		rows[i] = NodeStatus{Name: nodes[i].Name, Behind: -1}
		h, skew, err := fetchHealth(ctx, o, nodes[i])
		if err != nil {
			rows[i].State, rows[i].Error = StateUnreachable, err.Error()
			return
		}
		healths[i], rows[i].Skew = h, skew
		rows[i].Identity, rows[i].Verified = h.Identity, nodes[i].Identity != "" && nodes[i].Health != ""
	})
	ref := ""
	if len(o.Line) > 0 {
		ref = o.Line[len(o.Line)-1].Version
	} else {
		for _, h := range healths {
			if h != nil && (ref == "" || manifests.CompareVersions(h.Head.Version, ref) > 0) {
				ref = h.Head.Version
			}
		}
	}
	rep := &Report{Reference: ref, Nodes: rows, Counts: map[string]int{}}
	for i := range rows {
		if h := healths[i]; h != nil {
			judge(&rows[i], h, ref, o)
		}
		rep.Counts[rows[i].State]++
	}
	return rep
}

func (o *StatusOptions) setDefaults() {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: o.Timeout}
	}
	if o.Parallel <= 0 {
		o.Parallel = 64
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// judge fills in row from a node's health against reference head ref.
func judge(row *NodeStatus, h *schema.Health, ref string, o StatusOptions) {
	row.Head = h.Head.Version
	row.Pending = len(h.Pending) + len(h.Reboot)
	row.ConfigMatches = 1
	for _, c := range h.Configs {
		if c.SHA256 != c.Expected || c.Error != "" {
			row.ConfigMatches = 0
		}
		if c.ModTime.After(row.Newest) {
			row.Newest = c.ModTime
		}
	}
	if row.Pending > 0 || h.Agent.TreeMatches != nil && !*h.Agent.TreeMatches {
		row.ConfigMatches = 0
	}
	row.ConfigDigest, row.LoadedAt = h.ConfigDigest, h.LoadedAt
	row.Note = unitsNote(h)
	if row.Note != "" {
		row.ConfigMatches = 0
	}
	if f := h.LastFailure; f != nil {
		row.LastFailure = fmt.Sprintf("%s %s at %s", f.Action, f.Version, f.Time)
		if f.Action == manifests.LedgerRestart {
			row.LastFailure = fmt.Sprintf("restart failed at %s: %s; fix the unit, then strata restart settles the debt", f.Time, f.Error)
		}
	}
	if a := h.Agent.LastApply; a != nil && a.Result != "ok" && a.Result != "held" {
		row.LastFailure = fmt.Sprintf("apply %s: %s", a.Result, a.Reason)
		if a.Reason == "local_edit" {
			// What to do next is in the error: the files and the ways out.
			row.LastFailure += ": " + a.Error
		}
	}
	diverged := ""
	if len(o.Line) > 0 {
		at := -1
		for i, r := range o.Line {
			if r.Version == h.Head.Version {
				at = i
				if r.Digest != h.Head.Digest {
					diverged = fmt.Sprintf("head %s is %s, the repository's %s is %s", r.Version, h.Head.Digest, r.Version, r.Digest)
				}
			}
		}
		switch {
		case o.LineName != "" && h.Line != o.LineName:
			diverged = fmt.Sprintf("on line %q, not %q", h.Line, o.LineName)
		case at < 0:
			diverged = fmt.Sprintf("head %s is not in the repository's line", h.Head.Version)
		case diverged == "":
			row.Behind = len(o.Line) - 1 - at
		}
	}
	switch {
	case diverged != "":
		row.State, row.Error = StateDiverged, diverged
	case !h.Agent.ConfigValid && h.Agent.Config != "" && !strings.HasPrefix(h.Agent.Config, "not configured"):
		// The agent's own words: the file, the line, what is wrong, and
		// whether it follows on with its last good config.
		row.State, row.Error = StateFailing, "agent "+h.Agent.Config
	case h.LayerIntegrity != nil && h.LayerIntegrity.Refused != nil:
		r := h.LayerIntegrity.Refused
		row.State, row.ConfigMatches = StateFailing, 0
		row.Error = fmt.Sprintf("layer %s refused at activation (%s): it runs the layers below it; strata restart --repair --root %s rewrites it from its overlay", r.Version, r.Error, h.Root)
		if r.Cause == schema.RefusedRecord {
			row.Error = fmt.Sprintf("layer %s refused at activation (%s): it runs the layers below it; audit it with strata verify-sequence --root %s --pub KEY from a trusted system, and provision it anew", r.Version, r.Error, h.Root)
		}
	case h.Held != nil:
		row.State, row.Error = StateHeld, fmt.Sprintf("held at %s since %s: %s; strata release --root %s lets it follow the line", h.Held.Head.Version, h.Held.Since, h.Held.Reason, h.Root)
	case h.Agent.LastApply != nil && h.Agent.LastApply.Result == "held":
		// The agent's word, a moment newer than the node's state it
		// read (the hold document may not be in this answer yet).
		row.State, row.Error = StateHeld, fmt.Sprintf("held at %s: %s; strata release --root %s lets it follow the line", row.Head, h.Agent.LastApply.Error, h.Root)
	case h.Agent.LastApply != nil && h.Agent.LastApply.Result != "ok":
		row.State = StateFailing
	case row.Head != ref:
		row.State = StateBehind
		if row.Note == "" {
			row.Note = behindNote(row, h, ref)
		}
	case row.ConfigMatches == 0:
		row.State = StatePending
	default:
		row.State = StateCurrent
		row.Behind = 0
	}
}

// behindNote says how far a node is behind ref and what brings it there.
func behindNote(row *NodeStatus, h *schema.Health, ref string) string {
	how := fmt.Sprintf("%d overlays", row.Behind)
	if row.Behind < 0 {
		how = "behind"
	}
	next := "strata rollout (or strata apply-overlay --repo on it) brings it to " + ref
	if a := h.Agent; a.Repo != "" && !a.NextPoll.IsZero() {
		next = fmt.Sprintf("its agent polls %s next at %s (strata nudge, or strata rollout --via agent, makes it poll now)", a.Repo, a.NextPoll.UTC().Format(time.RFC3339))
	}
	if row.Behind < 0 {
		return fmt.Sprintf("at %s, not %s: %s", row.Head, ref, next)
	}
	return fmt.Sprintf("%s behind %s: %s", how, ref, next)
}

// unitsNote says which of a node's units is not current and what to do,
// the worst first ("" when every one is current).
func unitsNote(h *schema.Health) string {
	if h.UnitsError != "" {
		return "its units' config could not be read: " + h.UnitsError
	}
	rank := map[string]int{schema.UnitError: 0, schema.UnitBad: 1, schema.UnitFailed: 2, schema.UnitChanged: 3, schema.UnitLocalEdit: 4, schema.UnitOwed: 5}
	var worst *schema.UnitConfig
	others := 0
	for i, u := range h.Units {
		if u.Current() {
			continue
		}
		if worst == nil || rank[u.State] < rank[worst.State] {
			worst = &h.Units[i]
		}
		others++
	}
	if worst == nil {
		// A health document without units (a strata before them): the
		// debt and the config files say it.
		var owed []string
		for _, l := range [][]manifests.ServiceAction{h.Pending, h.Reboot} {
			for _, a := range l {
				owed = append(owed, string(a.Action)+" "+a.Unit)
			}
		}
		if len(owed) > 0 {
			return fmt.Sprintf("owes %s: strata restart-pending --root %s settles it", strings.Join(owed, ", "), h.Root)
		}
		for _, c := range h.Configs {
			if c.SHA256 != c.Expected || c.Error != "" {
				return fmt.Sprintf("/%s differs from the head's: strata restart --repair --root %s returns it, or publish it (strata config set)", c.Path, h.Root)
			}
		}
		if h.Agent.TreeMatches != nil && !*h.Agent.TreeMatches {
			return fmt.Sprintf("the node's files did not match its head at %s: strata verify-sequence --files --root %s names them", h.Agent.TreeChecked.Format(time.RFC3339), h.Root)
		}
		return ""
	}
	note := worst.Unit + ": " + worst.Note
	if others > 1 {
		note += fmt.Sprintf(" (and %d more units: strata status --root %s)", others-1, h.Root)
	}
	return note
}

// fetchHealth GETs a node's health, bounded in time and size, and the
// clock skew its Date header shows.
func fetchHealth(ctx context.Context, o StatusOptions, n Node) (*schema.Health, time.Duration, error) {
	if n.Health == "" {
		if o.SSH == nil {
			return nil, 0, fmt.Errorf("no health URL in the inventory, and SSH not in use")
		}
		return sshHealth(ctx, o.SSH, n, o.Timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	target, nonce := n.Health, ""
	if n.Identity != "" {
		// A fresh nonce the signed answer must carry: no replay of an
		// old answer passes.
		u, err := url.Parse(n.Health)
		if err != nil {
			return nil, 0, err
		}
		nonce = randomNonce()
		q := u.Query()
		q.Set("nonce", nonce)
		u.RawQuery = q.Encode()
		target = u.String()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, 0, err
	}
	before := o.Now()
	resp, err := o.Client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	after := o.Now()
	// The agent answers 503, with its health, while its configuration
	// is invalid or its last apply failed.
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return nil, 0, fmt.Errorf("GET %s: %s", n.Health, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxHealth+1))
	if err != nil {
		return nil, 0, fmt.Errorf("GET %s: %w", n.Health, err)
	}
	if len(b) > maxHealth {
		return nil, 0, fmt.Errorf("GET %s: health over %d bytes", n.Health, maxHealth)
	}
	if n.Identity != "" {
		if err := schema.CheckHealth(b, resp.Header.Get(schema.HealthSignatureHeader), n.Identity, nonce); err != nil {
			return nil, 0, fmt.Errorf("GET %s: %w", n.Health, err)
		}
	}
	h, err := decodeHealth(b, "GET "+n.Health, resp.Status)
	if err != nil {
		return nil, 0, err
	}
	var skew time.Duration
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		mid := before.Add(after.Sub(before) / 2)
		skew = d.Sub(mid).Truncate(time.Second)
	}
	return h, skew, nil
}

func randomNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// decodeHealth checks a health document from a node (where names the
// request; status is the HTTP status or the command's result).
func decodeHealth(b []byte, where, status string) (*schema.Health, error) {
	var doc struct {
		schema.Health
		Error string `json:"error"`
	}
	if err := manifests.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: not a strata health document: %v", where, err)
	}
	h := doc.Health
	if h.Head.Version == "" {
		// The agent answers but cannot read its node.
		msg := doc.Error
		if msg == "" {
			msg = "no head in its health"
		}
		return nil, fmt.Errorf("%s: %s: %s", where, status, msg)
	}
	if _, err := manifests.ParseVersion(h.Head.Version); err != nil {
		return nil, fmt.Errorf("%s: no usable health: head %q is not a version", where, h.Head.Version)
	}
	return &h, nil
}

// Sorted returns the report's nodes, worst first, then by name.
func (r *Report) Sorted() []NodeStatus {
	rank := map[string]int{StateUnreachable: 0, StateDiverged: 1, StateFailing: 2, StateBehind: 3, StateHeld: 4, StatePending: 5, StateCurrent: 6}
	out := append([]NodeStatus(nil), r.Nodes...)
	sort.SliceStable(out, func(i, j int) bool {
		if rank[out[i].State] != rank[out[j].State] {
			return rank[out[i].State] < rank[out[j].State]
		}
		return out[i].Name < out[j].Name
	})
	return out
}
