package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/node"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/overlay"
)

// Health is what GET /health reports.
type Health struct {
	// NodeID is the id provision --disk gave the node (state partition),
	// else its /etc/machine-id.
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
	// IndexSerial is the highest index serial the node accepted.
	IndexSerial uint64 `json:"index_serial"`
	// Services are the units of the node's catalog; Configs the managed
	// configuration files with their digests and times on disk.
	Services []string             `json:"services"`
	Configs  []overlay.ConfigFile `json:"configs,omitempty"`
	Agent    State                `json:"agent"`
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

// owes reports whether unit has a restart or reload pending, deferred to
// a reboot, or failed in the last attempt.
func (h *Health) owes(unit string) bool {
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

// Health reads the node's health: at most once every HealthCacheFor
// (health and metrics requests in between share the reading), since it
// reads the ledger, folds the node's tree and hashes its config files.
func (a *Agent) Health(ctx context.Context) (*Health, error) { return a.nodeHealth(ctx, true) }

// HealthCacheFor is how long one reading of the node's health serves
// requests.
const HealthCacheFor = 2 * time.Second

func (a *Agent) nodeHealth(ctx context.Context, configs bool) (*Health, error) {
	a.healthMu.Lock()
	defer a.healthMu.Unlock()
	if a.health != nil && time.Since(a.healthAt) < HealthCacheFor {
		h := *a.health
		h.Agent = a.State()
		if !configs {
			h.Configs = nil
		}
		return &h, nil
	}
	h, err := a.readHealth(ctx)
	if err != nil {
		return nil, err
	}
	a.health, a.healthAt = h, time.Now()
	out := *h
	if !configs {
		out.Configs = nil
	}
	return &out, nil
}

func (a *Agent) readHealth(ctx context.Context) (*Health, error) {
	h, err := ReadHealth(ctx, a.o.Root)
	if err != nil {
		return nil, err
	}
	h.Agent = a.State()
	return h, nil
}

// ReadHealth reads the health of the node at root, as its agent reports
// it, without the agent's own state (strata health prints it for fleet
// tools that reach the node over SSH).
func ReadHealth(ctx context.Context, root string) (*Health, error) {
	st, err := overlay.NodeStatus(ctx, root)
	if err != nil {
		return nil, err
	}
	h := &Health{Root: root, Backend: st.Backend, Line: st.Line, Image: st.Image, Head: st.Head,
		Layers: st.Layers, Pending: st.Pending, Reboot: st.Reboot, LastFailure: st.LastFailure}
	n := node.Node{Root: root}
	if h.IndexSerial, err = n.IndexSerial(); err != nil {
		return nil, err
	}
	if raw, err := safefile.Read(n.Path(manifests.LedgerPath), manifests.MaxManifestSize); err == nil {
		sum := sha256.Sum256(raw)
		h.LedgerDigest = "sha256:" + hex.EncodeToString(sum[:])
	}
	h.NodeID = nodeID(root)
	if k, err := n.Identity(false); err == nil {
		h.Identity = k.PublicString()
	}
	cs, err := overlay.NodeConfigs(ctx, root)
	if err != nil {
		return nil, err
	}
	h.Services, h.Configs = cs.Services, cs.Files
	return h, nil
}

// nodeID reads the node's id: the state partition's, else machine-id.
func nodeID(root string) string {
	for _, p := range []string{"state/identity/node-id", "etc/machine-id"} {
		if raw, err := safefile.Read(filepath.Join(root, p), 256); err == nil {
			if id := strings.TrimSpace(string(raw)); id != "" {
				return id
			}
		}
	}
	host, _ := os.Hostname()
	return host
}
