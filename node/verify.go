package node

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
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
	v, err := loadView(n)
	if err != nil {
		a.Problem("chain", "", "%v", err)
		return a, nil
	}
	head := v.head()
	a.Head, a.Line = &head, v.ledger.Entries[0].Line
	a.Pending = v.ledger.PendingRestarts()
	a.TreeDigest = v.ledger.Last().TreeDigest
	for _, p := range a.Pending {
		a.Warn("pending-restart", "%s of %s is pending (because of %s)", p.Action, p.Unit, strings.Join(p.Because, ", "))
	}
	prev := v.ledger.Canonical().Head
	for i, e := range v.applied {
		a.Applied = append(a.Applied, e.Version)
		m := v.overlays[i]
		if m.Parent != prev {
			a.Problem("gap", "", "overlay %s names parent %s but follows %s in the ledger", e.Version, m.Parent.Version, prev.Version)
		}
		prev = e.Head
	}
	if trust != nil {
		auditSignatures(a, v, sign.WithHistory(trust, history))
	}
	if repoDir != "" {
		if err := auditAgainstRepo(ctx, a, v, repoDir, trust, history); err != nil {
			return nil, err
		}
	}
	if files {
		if err := auditFiles(ctx, a, v, b); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// auditSignatures checks the manifests the node's expected tree comes
// from against the auditor's keys.
func auditSignatures(a *schema.Audit, v *nodeView, trust *sign.KeySet) {
	m := v.image.Manifest
	if _, err := trust.VerifyFor(v.image.Raw, v.imageSig, sign.ImageComment(m.Line, m.Version)); err != nil {
		a.Problem("signature", "", "image manifest %s: %v", m.Version, err)
	}
	for _, e := range v.applied {
		var raw []byte
		sig, err := safefile.Read(filepath.Join(v.n.ManifestStore(), e.Version+".json.minisig"), sign.MaxSignatureSize)
		if err == nil {
			if raw, err = safefile.Read(filepath.Join(v.n.ManifestStore(), e.Version+".json"), manifests.MaxManifestSize); err == nil {
				_, err = trust.VerifyFor(raw, sig, sign.OverlayComment(e.Line, e.Version))
			}
		}
		var m manifests.OverlayManifest
		if err == nil {
			err = manifests.Decode(raw, &m)
		}
		if err != nil {
			a.Problem("signature", "", "overlay manifest %s: %v", e.Version, err)
			continue
		}
		// A key rotation the auditor's keys verify changes them for
		// the overlays after it, as it did on the node. It is read
		// from the bytes just verified, not from an earlier read.
		if next, err := trust.After(&m); err == nil {
			trust = next
		}
	}
}

func auditAgainstRepo(ctx context.Context, a *schema.Audit, v *nodeView, repoDir string, trust, history *sign.KeySet) error {
	st, done, err := repo.LocateForRereads(repoDir, nil)
	if err != nil {
		return err
	}
	defer done()
	var r *repo.Repo
	if trust == nil {
		// The node's keys are those of its head, where following the
		// line's key rotations starts.
		if trust, err = v.n.TrustedKeys(); err != nil {
			return err
		}
		r, err = repo.OpenAt(ctx, st, trust, repo.Position{Line: a.Line, Head: *a.Head})
	} else {
		r, err = repo.OpenAudited(ctx, st, trust, history)
	}
	if err != nil {
		a.Problem("signature", "", "%v", err)
		return nil
	}
	// An authentic but old or expired index must not make the node look
	// current.
	accepted, err := v.n.IndexSerial()
	if err != nil {
		return err
	}
	if err := r.Index.CheckFresh(time.Now(), accepted); err != nil {
		a.Problem("freshness", "", "%v", err)
	}
	l, err := r.Index.Find(a.Line)
	if err != nil {
		a.Problem("unknown", "", "%v", err)
		return nil
	}
	if err := r.Expand(ctx, l); err != nil {
		a.Problem("tampered", "", "%v", err)
		return nil
	}
	rh := l.Head()
	a.RepoHead = &rh
	im := v.canon.Manifest
	switch {
	case im.Base == nil && v.canon.Digest != l.Image.Digest:
		a.Problem("unknown", "", "the node's image %s (%s) is not line %s's image %s (%s)", im.Version, v.canon.Digest, l.Name, l.Image.Version, l.Image.Digest)
	case im.Base != nil && im.Base.Digest != l.Image.Digest:
		a.Problem("unknown", "", "the node's regenerated image was built from %s (%s), not line %s's image %s (%s)", im.Base.Version, im.Base.Digest, l.Name, l.Image.Version, l.Image.Digest)
	}
	// The node's sequence must be the index's, from where the node joined.
	pos := -1
	start := v.ledger.Canonical().Head
	if start.Digest == l.Image.Digest {
		pos = 0
	}
	for i, o := range l.Overlays {
		if o.Digest == start.Digest {
			pos = i + 1
		}
	}
	if pos < 0 {
		a.Problem("unknown", "", "the node's starting point %s (%s) is not in line %s", start.Version, start.Digest, l.Name)
		return nil
	}
	for _, e := range v.applied {
		if pos >= len(l.Overlays) {
			a.Problem("unknown", "", "overlay %s (%s) is not in the repository's index", e.Version, e.Digest)
			return nil
		}
		want := l.Overlays[pos]
		switch {
		case want.Version == e.Version && want.Digest != e.Digest:
			a.Problem("tampered", "", "overlay %s has digest %s on the node, %s in the index", e.Version, e.Digest, want.Digest)
		case want.Version != e.Version:
			found := false
			for _, o := range l.Overlays {
				if o.Version == e.Version {
					found = true
				}
			}
			if found {
				a.Problem("gap", "", "node applied %s where the index has %s next", e.Version, want.Version)
			} else {
				a.Problem("unknown", "", "overlay %s (%s) is not in the repository's index", e.Version, e.Digest)
			}
			return nil
		}
		pos++
	}
	a.Behind = len(l.Overlays) - pos
	if a.Behind > 0 {
		var missing []string
		for _, o := range l.Overlays[pos:] {
			missing = append(missing, o.Version)
		}
		a.Warn("behind", "node is %d overlay(s) behind the head %s: %s", a.Behind, rh.Version, strings.Join(missing, ", "))
	}
	return nil
}
