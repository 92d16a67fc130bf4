package overlay

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/schema"
)

// VerifyRepo audits a repository: the index signature, every image and
// overlay signature and digest, parent links, monotonic versions, each
// overlay's tree digest against the folded chain, and image constraints.
// trust nil uses the keys the images list.
func VerifyRepo(ctx context.Context, repoDir string, trust *sign.KeySet) (*schema.Audit, error) {
	return VerifyRepoAs(ctx, repoDir, trust, nil)
}

// VerifyRepoAs is VerifyRepo with history keys besides the auditor's
// (see node.VerifyOptions): the index must be signed by one of trust, the
// lines' images and overlays by trust or history, as rotations change
// them.
func VerifyRepoAs(ctx context.Context, repoDir string, trust, history *sign.KeySet) (*schema.Audit, error) {
	a := &schema.Audit{Repo: repoDir, Pending: []manifests.ServiceAction{}, Findings: []schema.Finding{}}
	st, done, err := repo.LocateForRereads(repoDir, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	r, err := repo.OpenAudited(ctx, st, trust, history)
	if err != nil {
		a.Problem("signature", "", "%v", err)
		return a, nil
	}
	trust = sign.WithHistory(trust, history)
	if err := r.Index.CheckFresh(time.Now(), 0); err != nil {
		a.Problem("freshness", "", "%v", err)
	}
	indexed := map[string]bool{}
	for i := range r.Index.Lines {
		l := &r.Index.Lines[i]
		if err := r.Expand(ctx, l); err != nil {
			a.Problem("tampered", "", "%v", err) // it names the line
			continue
		}
		indexed[filepath.Clean(l.Image.File)] = true
		for _, o := range l.Overlays {
			indexed[filepath.Clean(o.File)] = true
		}
		if sum, _, err := repo.HashMember(ctx, r.Store, l.Image.File, l.Image.Size); err != nil {
			a.Problem("tampered", "", "line %s: image %s: %v", l.Name, l.Image.File, err)
		} else if sum != l.Image.SHA256 {
			a.Problem("tampered", "", "line %s: image %s has sha256 %s, index says %s", l.Name, l.Image.File, sum, l.Image.SHA256)
		}
		c, err := LoadChain(ctx, r, l.Name, "", trust)
		if err != nil {
			a.Problem("chain", "", "line %s: %v", l.Name, err)
			continue
		}
		if err := c.CheckIndexKey(); err != nil {
			a.Problem("signature", "", "%v", err)
		}
		auditState(ctx, a, r, c)
		for _, u := range l.Upgrades {
			indexed[filepath.Clean(u.File)] = true
			auditUpgradeImage(ctx, a, r, c, u)
		}
		for _, o := range c.Overlays {
			ok, err := manifests.Satisfies(c.Image.Manifest.Version, o.Manifest.Requires.Image)
			if err != nil || !ok {
				a.Problem("constraint", "", "line %s: overlay %s requires image %s, line image is %s", l.Name, o.Manifest.Version, o.Manifest.Requires.Image, c.Image.Manifest.Version)
			}
		}
		h := c.Head()
		a.RepoHead, a.Line = &h, l.Name
	}
	if repo.IsURL(repoDir) {
		return a, nil // a server lists no directories
	}
	stray, _ := filepath.Glob(filepath.Join(repoDir, "overlays", "*"))
	for _, s := range stray {
		rel, _ := filepath.Rel(repoDir, s)
		if !indexed[rel] && !strings.HasPrefix(filepath.Base(s), ".") {
			a.Warn("unknown", "%s is not in the index", rel)
		}
	}
	if _, err := os.Stat(filepath.Join(repoDir, "index.json")); err != nil {
		return nil, err
	}
	return a, nil
}

// auditUpgradeImage checks one of a line's upgrade images: its file and
// manifest as the index pins them, signed by a key the line trusts at its
// head, a regenerated one built from the line's image with the tree its
// head folds to.
func auditUpgradeImage(ctx context.Context, a *schema.Audit, r *repo.Repo, c *Chain, u manifests.ImageRef) {
	l := c.Line
	if sum, _, err := repo.HashMember(ctx, r.Store, u.File, u.Size); err != nil {
		a.Problem("tampered", "", "line %s: upgrade image %s: %v", l.Name, u.File, err)
	} else if sum != u.SHA256 {
		a.Problem("tampered", "", "line %s: upgrade image %s has sha256 %s, index says %s", l.Name, u.File, sum, u.SHA256)
	}
	if b := u.Boot; b != nil {
		if sum, _, err := repo.HashMember(ctx, r.Store, b.File, b.Size); err != nil {
			a.Problem("tampered", "", "line %s: boot image %s of upgrade image %s: %v", l.Name, b.File, u.Version, err)
		} else if sum != b.SHA256 {
			a.Problem("tampered", "", "line %s: boot image %s of upgrade image %s has sha256 %s, index says %s", l.Name, b.File, u.Version, sum, b.SHA256)
		}
	}
	im, err := r.ImageOf(ctx, l, u, c.Keys)
	if err != nil {
		a.Problem("tampered", "", "%v", err)
		return
	}
	if u.Head == nil {
		return
	}
	m := im.Manifest
	switch k := chainIndex(c, *u.Head); {
	case m.Base == nil || m.Base.Digest != l.Image.Digest:
		a.Problem("chain", "", "line %s: regenerated image %s is not built from the line's image %s", l.Name, u.File, l.Image.Version)
	case k < 0:
		a.Problem("chain", "", "line %s: regenerated image %s folds through %s (%s), which is not in the line", l.Name, u.File, u.Head.Version, u.Head.Digest)
	case c.Overlays[k].Manifest.TreeDigest != m.TreeDigest:
		a.Problem("tree", "", "line %s: regenerated image %s has tree %s, the line at %s has %s", l.Name, u.File, m.TreeDigest, u.Head.Version, c.Overlays[k].Manifest.TreeDigest)
	}
}

// chainIndex returns where overlay ref is in c, or -1.
func chainIndex(c *Chain, ref manifests.Ref) int {
	for i, o := range c.Overlays {
		if o.Manifest.Version == ref.Version && o.Digest == ref.Digest {
			return i
		}
	}
	return -1
}

// auditState checks a line's head state, which publishers trust instead
// of the chain, against the chain itself: the same tree, catalog and keys.
func auditState(ctx context.Context, a *schema.Audit, r *repo.Repo, c *Chain) {
	l := c.Line
	if l.State == nil || l.State.Version != l.Head().Version {
		return
	}
	hs, err := repo.LoadHead(ctx, r, l.Name)
	if err != nil {
		a.Problem("state", "", "%v", err) // it names the line
		return
	}
	if hs.State.Digest() != c.State.Digest() {
		a.Problem("state", "", "line %s: the head state's tree %s is not the chain's %s", l.Name, hs.State.Digest(), c.State.Digest())
	}
	want, _ := manifests.Encode(&c.Catalog)
	got, _ := manifests.Encode(&hs.Catalog)
	if string(want) != string(got) {
		a.Problem("state", "", "line %s: the head state's service catalog is not the chain's", l.Name)
	}
	if strings.Join(hs.Keys.Strings(), ",") != strings.Join(c.Keys.Strings(), ",") {
		a.Problem("state", "", "line %s: the head state trusts keys %v, the chain %v", l.Name, hs.Keys.IDs(), c.Keys.IDs())
	}
}
