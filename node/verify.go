package node

import (
	"context"
	"strings"

	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/node/internal/audit"
	"github.com/strata-dev/strata/node/internal/view"
	"github.com/strata-dev/strata/schema"
)

// VerifyOptions are the settings of one Verify.
type VerifyOptions struct {
	// Repo is the repository (directory or URL) whose signed index the
	// node's sequence is checked against; empty: the node alone.
	Repo string
	// Files checks every file of the tree against the expected state.
	Files bool
	// Trust is the auditor's own trust. When set, the signatures of the
	// image manifest and of every overlay manifest in effect (kept on the
	// node since provisioning and apply) must verify against it, and the
	// repository index is checked against it instead of the keys the node
	// carries, which root on the node could replace.
	Trust *sign.KeySet
	// History are keys besides Trust that verify the node's image and
	// overlay manifests (and the line's, in the repository), never the
	// index. After a key rotation that revoked a compromised key, the
	// auditor names the new key as Trust and the old one as History: the
	// node's history is checked, and an index the old key signs is not
	// taken.
	History *sign.KeySet
}

// Verify audits the node: its ledger's hash chain, the stored manifests
// of the overlays in effect and their parent links, against the
// repository's signed index when o.Repo is set, and with o.Files, every
// file of the tree against the expected state. It changes nothing. The
// error is for audits that could not run; what they found is in Audit.
func (h *Node) Verify(ctx context.Context, o VerifyOptions) (*schema.Audit, error) {
	b, root, repoDir, files, trust, history := h.b, h.root, o.Repo, o.Files, o.Trust, o.History
	n := b.Node()
	a := &schema.Audit{Root: root, Repo: repoDir, Findings: []schema.Finding{}}
	if what, err := b.Interrupted(); err != nil {
		a.Problem("chain", "", "unreadable transaction journal: %v", err)
	} else if what != "" {
		a.Problem("chain", "", "%s; any strata run that changes the node (apply-overlay, rollback, restart, gc) finishes it first", what)
	}
	if strays, err := n.Strays(); err != nil {
		a.Problem("chain", "", "%v", err)
	} else {
		for _, p := range strays {
			a.Warn("stray", "%s was left by an interrupted write of node state; the next apply-overlay, rollback, gc or restart removes it", p)
		}
	}
	v, err := view.Load(n)
	if err != nil {
		a.Problem("chain", "", "%v", err)
		return a, nil
	}
	head := v.Head()
	a.Head, a.Line = &head, v.Ledger.Entries[0].Line
	a.Pending = v.Ledger.PendingRestarts()
	a.TreeDigest = v.Ledger.Last().TreeDigest
	for _, p := range a.Pending {
		a.Warn("pending-restart", "%s of %s is pending (because of %s)", p.Action, p.Unit, strings.Join(p.Because, ", "))
	}
	prev := v.Ledger.Canonical().Head
	for i, e := range v.Applied {
		a.Applied = append(a.Applied, e.Version)
		m := v.Overlays[i]
		if m.Parent != prev {
			a.Problem("gap", "", "overlay %s names parent %s but follows %s in the ledger", e.Version, m.Parent.Version, prev.Version)
		}
		prev = e.Head
	}
	if trust != nil {
		audit.Signatures(a, v, sign.WithHistory(trust, history))
	}
	if repoDir != "" {
		if err := audit.AgainstRepo(ctx, a, v, repoDir, trust, history); err != nil {
			return nil, err
		}
	}
	if files {
		if err := audit.Files(ctx, a, v, b); err != nil {
			return nil, err
		}
	}
	return a, nil
}
