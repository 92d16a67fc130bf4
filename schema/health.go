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
	// IndexSerial is the highest index serial the node accepted.
	IndexSerial uint64 `json:"index_serial"`
	// Services are the units of the node's catalog; Configs the managed
	// configuration files with their digests and times on disk.
	Services []string     `json:"services"`
	Configs  []ConfigFile `json:"configs,omitempty"`
	Agent    AgentState   `json:"agent"`
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
	Reason  string `json:"reason,omitempty"`
	Error   string `json:"error,omitempty"`
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
