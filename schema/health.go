package schema

import (
	"time"

	"github.com/strata-dev/strata/manifests"
)

// Health is a node's health as its agent serves it on /health and
// `strata health --json` prints it.
type Health struct {
	// NodeID is the node's own id: the one provision --disk gave it
	// (state partition), else its identity key's id, else its
	// /etc/machine-id; the host name only for the running system; never
	// the host's for another node (empty when it has none).
	NodeID  string        `json:"node_id"`
	Root    string        `json:"root"`
	Backend string        `json:"backend"`
	Line    string        `json:"line"`
	Image   manifests.Ref `json:"image"`
	Head    manifests.Ref `json:"head"`
	// LedgerDigest is the SHA-256 of the ledger file.
	LedgerDigest string                    `json:"ledger_digest"`
	Layers       []string                  `json:"layers"`
	Pending      []manifests.ServiceAction `json:"pending_restarts"`
	Reboot       []manifests.ServiceAction `json:"reboot_required"`
	LastFailure  *manifests.LedgerEntry    `json:"last_failure,omitempty"`
	// Held is the node's hold: nothing moves it until it is released.
	Held *manifests.Hold `json:"held,omitempty"`
	// LayerIntegrity says, for a node that stacks layers, how they are
	// checked, and names a layer image its activation refused.
	LayerIntegrity *LayerIntegrity `json:"layer_integrity,omitempty"`
	// IndexSerial is the highest index serial the node accepted.
	IndexSerial uint64 `json:"index_serial"`
	// Services are the units of the node's catalog; Configs the managed
	// configuration files with their digests and times on disk.
	Services []string     `json:"services"`
	Configs  []ConfigFile `json:"configs,omitempty"`
	// Units are the managed units' configurations: on disk, as the head
	// has them, and as each unit loaded them.
	Units []UnitConfig `json:"units"`
	// ConfigDigest is the digest of every unit's config on disk (the
	// digests of Units in order), LoadedAt the newest load among them.
	ConfigDigest string    `json:"config_digest,omitempty"`
	LoadedAt     time.Time `json:"loaded_at,omitzero"`
	// UnitsError says why Units could not be read.
	UnitsError string     `json:"units_error,omitempty"`
	Agent      AgentState `json:"agent"`
	// Identity is the node's identity key (minisign public key, one-line
	// base64), which signs its agent's health answers; empty where the
	// node has none yet.
	Identity string `json:"identity,omitempty"`
	// Nonce is the one the client sent with its request (?nonce=), in
	// the signed body.
	Nonce string `json:"nonce,omitempty"`
	// Now is the node's clock when strata health printed the document
	// (fleet status over SSH reads the clock skew from it); the agent
	// leaves it out, its answers carry a Date header.
	Now time.Time `json:"now,omitzero"`
}

// Owes reports whether unit has a restart or reload pending, deferred to
// a reboot, or failed in the last attempt.
func (h *Health) Owes(unit string) bool {
	for _, l := range [][]manifests.ServiceAction{h.Pending, h.Reboot} {
		for _, a := range l {
			if a.Unit == unit {
				return true
			}
		}
	}
	if f := h.LastFailure; f != nil {
		for _, l := range [][]manifests.ServiceAction{f.Pending, f.Done} {
			for _, a := range l {
				if a.Unit == unit {
					return true
				}
			}
		}
	}
	return false
}

// AgentState is what a node's agent last did, for health and metrics.
type AgentState struct {
	// Config is "ok", "not configured" or "config invalid: ...".
	Config      string `json:"config"`
	ConfigValid bool   `json:"config_valid"`
	Repo        string `json:"repo,omitempty"`
	// LastPoll is the last successful poll; LastPollError the last
	// failed one's error, cleared by a success.
	LastPoll      time.Time `json:"last_poll,omitzero"`
	LastPollError string    `json:"last_poll_error,omitempty"`
	// UnreachableSince is the first failed poll since the last
	// successful one (zero while polls succeed), and UnreachableSeconds
	// how long ago that was when the state was read: a repository outage
	// leaves the node healthy (/health stays 200: it serves as before)
	// but says for how long it has not been able to update.
	UnreachableSince   time.Time `json:"repo_unreachable_since,omitzero"`
	UnreachableSeconds float64   `json:"repo_unreachable_seconds,omitempty"`
	// LastApply is the last apply attempt.
	LastApply *ApplyResult `json:"last_apply,omitempty"`
	// Failures counts consecutive failed polls and applies.
	Failures int `json:"consecutive_failures"`
	// NextPoll is when the agent polls next (unless nudged).
	NextPoll time.Time `json:"next_poll,omitzero"`
	// TreeMatches reports whether the node's files matched its head at
	// TreeChecked (nil before the first check).
	TreeMatches *bool     `json:"tree_matches_head,omitempty"`
	TreeChecked time.Time `json:"tree_checked,omitzero"`
}

// ApplyResult is one apply attempt of an agent.
type ApplyResult struct {
	Time time.Time `json:"time"`
	// Result is "ok" or "failed".
	Result string `json:"result"`
	// From and To are the node's heads before and after.
	From    string `json:"from,omitempty"`
	To      string `json:"to,omitempty"`
	Applied int    `json:"applied"`
	// Units are the restarts and reloads the applied overlays planned
	// ("reload nginx.service"), in order.
	Units  []string `json:"units,omitempty"`
	Reason string   `json:"reason,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// ConfigFile is a managed configuration file as it is on the node.
type ConfigFile struct {
	// Path is the tree path (etc/...).
	Path string `json:"path"`
	// Units are the catalog's services that claim it.
	Units []string `json:"units"`
	// SHA256 is the hex digest of the file on disk ("" when it is missing
	// or not a regular file; Error says why).
	SHA256 string `json:"sha256,omitempty"`
	// Expected is the digest the node's tree says the file has.
	Expected string `json:"expected"`
	// ModTime is the file's modification time on disk.
	ModTime time.Time `json:"mtime,omitzero"`
	Error   string    `json:"error,omitempty"`
}

// Configs are a node's services and the configuration files they claim.
type Configs struct {
	// Services are the units of the node's service catalog.
	Services []string     `json:"services"`
	Files    []ConfigFile `json:"files"`
}

// UnitConfig states, worst first where several apply.
const (
	UnitError     = "error"      // its config could not be read
	UnitBad       = "bad"        // the config on disk differs from what it loaded and fails its validation
	UnitFailed    = "failed"     // the service manager has it failed
	UnitChanged   = "changed"    // the config on disk differs from what it loaded: a restart or reload is pending
	UnitLocalEdit = "local-edit" // it runs a config that differs from the head's
	UnitOwed      = "owed"       // a restart or reload is owed (restart debt, a reboot, a failed restart)
	UnitCurrent   = "current"    // it loaded the config on disk, which is the head's
)

// UnitConfig is one managed unit's configuration: its config set (unit
// files, declared paths, reload paths) on disk, as the node's head has
// it, and as the unit loaded it.
type UnitConfig struct {
	Unit  string `json:"unit"`
	State string `json:"state"`
	// Disk, Head and Loaded are config set digests; Loaded is empty when
	// what the unit loaded is not known (a file changed after it
	// started, and strata did not record the start) or it does not run.
	Disk   string `json:"disk_digest,omitempty"`
	Head   string `json:"head_digest"`
	Loaded string `json:"loaded_digest,omitempty"`
	// LoadedAt is when the unit last started or reloaded, LoadedBy what
	// says so: the strata command that did it ("apply 1.2.0",
	// "restart", ...), "systemd" (the service manager's start or reload
	// time, the files unchanged since), or "presumed" (no record and no
	// service manager to ask: the node's last change).
	LoadedAt     time.Time `json:"loaded_at,omitzero"`
	LoadedBy     string    `json:"loaded_by,omitempty"`
	InvocationID string    `json:"invocation_id,omitempty"`
	// Active is the service manager's ActiveState, where it was asked.
	Active string `json:"active_state,omitempty"`
	// Differ are the paths whose content on disk differs from what the
	// unit loaded (or changed after it loaded, when that is not known);
	// Drift the paths where the disk differs from the head.
	Differ []string `json:"differ,omitempty"`
	Drift  []string `json:"drift,omitempty"`
	// Note says what is wrong and what to do; empty when current.
	Note  string `json:"note,omitempty"`
	Error string `json:"error,omitempty"`
}

// Current reports whether the unit runs with the config on disk and that
// config is the head's.
func (u UnitConfig) Current() bool { return u.State == UnitCurrent }
