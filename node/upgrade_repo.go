package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
)

// UpgradeFromRepo opens the repository at loc as the node trusts
// it (its keys, its position in the line, an index not older than one it
// accepted and not expired) and calls fetch with the image of the node's
// line it would upgrade to: with compact, the regenerated image through
// the node's head; else the line's newest image of a recipe, which must
// be newer than the one the node runs. fetch copies the image out (see
// repo.FetchImageRef); Upgrade verifies it again against the node.
func (h *Node) UpgradeFromRepo(ctx context.Context, loc string, compact bool, fetch func(*repo.Repo, manifests.ImageRef) error) error {
	n := h.state()
	if err := refuseStaged(n, "another upgrade"); err != nil {
		return err
	}
	if err := refuseHeld(n, "an upgrade"); err != nil {
		return err
	}
	v, err := view.Load(n)
	if err != nil {
		return err
	}
	trust, err := n.TrustedKeys()
	if err != nil {
		return err
	}
	st, done, err := repo.LocateForRereads(loc, nil)
	if err != nil {
		return err
	}
	defer done()
	line, head := v.Ledger.Entries[0].Line, v.Head()
	r, err := repo.OpenAt(ctx, st, trust, repo.Position{Line: line, Head: head})
	if err != nil {
		return err
	}
	accepted, err := n.IndexSerial()
	if err != nil {
		return err
	}
	if err := r.Index.CheckFresh(time.Now(), accepted); err != nil {
		return fmt.Errorf("repository %s: %w", loc, err)
	}
	l, err := r.Index.Find(line)
	if err != nil {
		return err
	}
	if i, err := r.Find(ctx, l, head); err != nil {
		return err
	} else if i < 0 {
		return fmt.Errorf("node head %s (%s) is not in line %s of %s: %w", head.Version, head.Digest, line, loc, ErrSequence)
	}
	// The index must be signed by a key the line still trusts at its
	// head (as apply-overlay --repo requires).
	keys, err := repo.HeadKeys(ctx, r, l)
	if err != nil {
		return err
	}
	if !keys.Has(r.KeyID) {
		return fmt.Errorf("repository %s: the index is signed by key %s, which line %s no longer trusts at its head (trusted: %s): %w", loc, r.KeyID, l.Name, strings.Join(keys.IDs(), ", "), sign.ErrBadSignature)
	}
	ref, err := pickUpgrade(l, v.Image.Manifest.Version, head, compact)
	if err != nil {
		return fmt.Errorf("repository %s: %w", loc, err)
	}
	return fetch(r, ref)
}

// pickUpgrade chooses the upgrade image of line l for a node running
// image version running at head.
func pickUpgrade(l *manifests.Line, running string, head manifests.Ref, compact bool) (manifests.ImageRef, error) {
	if compact {
		for _, u := range l.Upgrades {
			if u.Head != nil && u.Head.Digest == head.Digest {
				return u, nil
			}
		}
		return manifests.ImageRef{}, fmt.Errorf("line %s has no regenerated image through the node's head %s; publish one with strata regenerate --through %s and strata repo add-image: %w", l.Name, head.Version, head.Version, ErrUpgrade)
	}
	var newest *manifests.ImageRef
	var all []string
	for i, u := range l.Upgrades {
		if u.Head == nil {
			newest = &l.Upgrades[i]
			all = append(all, u.Version)
		}
	}
	if newest == nil || manifests.CompareVersions(newest.Version, running) <= 0 {
		have := "none"
		if len(all) > 0 {
			have = strings.Join(all, ", ")
		}
		return manifests.ImageRef{}, fmt.Errorf("line %s has no image newer than the node's %s (upgrade images: %s): %w", l.Name, running, have, ErrUpgrade)
	}
	return *newest, nil
}
