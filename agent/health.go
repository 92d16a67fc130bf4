package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node"
	"github.com/strata-dev/strata/schema"
)

// Health reads the node's health: at most once every HealthCacheFor
// (health and metrics requests in between share the reading), since it
// reads the ledger, folds the node's tree and hashes its config files.
func (a *Agent) Health(ctx context.Context) (*schema.Health, error) { return a.nodeHealth(ctx, true) }

// HealthCacheFor is how long one reading of the node's health serves
// requests.
const HealthCacheFor = 2 * time.Second

func (a *Agent) nodeHealth(ctx context.Context, configs bool) (*schema.Health, error) {
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

func (a *Agent) readHealth(ctx context.Context) (*schema.Health, error) {
	obs, _ := a.o.Restarter.(node.Observer)
	h, err := ReadHealth(ctx, a.o.Root, obs)
	if err != nil {
		return nil, err
	}
	h.Agent = a.State()
	return h, nil
}

// ReadHealth reads the health of the node at root, as its agent reports
// it, without the agent's own state (strata health prints it for fleet
// tools that reach the node over SSH).
//
// obs, when not nil, is the node's service manager: what each unit
// loaded is then checked against its runs, and a changed config on disk
// is validated.
func ReadHealth(ctx context.Context, root string, obs node.Observer) (*schema.Health, error) {
	nd, err := node.Open(root, node.Options{Observer: obs})
	if err != nil {
		return nil, err
	}
	st, err := nd.Status(ctx)
	if err != nil {
		return nil, err
	}
	h := &schema.Health{Root: root, Backend: st.Backend, Line: st.Line, Image: st.Image, Head: st.Head,
		Layers: st.Layers, Pending: st.Pending, Reboot: st.Reboot, LastFailure: st.LastFailure, Held: st.Held,
		Units: st.Units, UnitsError: st.UnitsError, LayerIntegrity: st.LayerIntegrity}
	if len(st.Units) > 0 {
		h.ConfigDigest = node.ConfigDigest(st.Units)
	}
	for _, u := range st.Units {
		if u.LoadedAt.After(h.LoadedAt) {
			h.LoadedAt = u.LoadedAt
		}
	}
	n := nodestate.Node{Root: root}
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
	cs, err := nd.Configs(ctx)
	if err != nil {
		return nil, err
	}
	h.Services, h.Configs = cs.Services, cs.Files
	return h, nil
}

// nodeID is the node's own id, never the host's: the id it was
// provisioned with (the state partition's node-id), else its identity
// key's id (made by its agent), else its machine-id; the host name only
// for the node that is the running system.
func nodeID(root string) string {
	if id := readID(filepath.Join(root, "state/identity/node-id")); id != "" {
		return id
	}
	if k, err := (nodestate.Node{Root: root}).Identity(false); err == nil {
		return k.ID()
	}
	if id := readID(filepath.Join(root, "etc/machine-id")); id != "" {
		return id
	}
	if filepath.Clean(root) == "/" {
		host, _ := os.Hostname()
		return host
	}
	return ""
}

// readID reads a one-line id file (at most 256 bytes); "" if there is
// none.
func readID(p string) string {
	raw, err := safefile.Read(p, 256)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}
