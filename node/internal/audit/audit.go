package audit

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/strata-dev/strata/internal/nodestate"
	"github.com/strata-dev/strata/internal/repo"
	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
	"github.com/strata-dev/strata/node/internal/view"
	"github.com/strata-dev/strata/schema"
)

// Signatures checks the manifests the node's expected tree comes
// from against the auditor's keys.
func Signatures(a *schema.Audit, v *view.View, trust *sign.KeySet) {
	m := v.Image.Manifest
	if _, err := trust.VerifyFor(v.Image.Raw, v.ImageSig, sign.ImageComment(m.Line, m.Version)); err != nil {
		a.Problem("signature", "", "image manifest %s: %v", m.Version, err)
	}
	for _, e := range v.Applied {
		var raw []byte
		sig, err := safefile.Read(filepath.Join(v.N.ManifestStore(), e.Version+".json.minisig"), sign.MaxSignatureSize)
		if err == nil {
			if raw, err = safefile.Read(filepath.Join(v.N.ManifestStore(), e.Version+".json"), manifests.MaxManifestSize); err == nil {
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

// AgainstRepo checks the node's sequence against the signed index of the
// repository at repoDir: authentic (against trust, else the node's keys
// from its position), fresh, of the node's line and image, with the
// node's overlays in its order; how far behind the node is.
func AgainstRepo(ctx context.Context, a *schema.Audit, v *view.View, repoDir string, trust, history *sign.KeySet) error {
	st, done, err := repo.LocateForRereads(repoDir, nil)
	if err != nil {
		return err
	}
	defer done()
	var r *repo.Repo
	if trust == nil {
		// The node's keys are those of its head, where following the
		// line's key rotations starts.
		if trust, err = v.N.TrustedKeys(); err != nil {
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
	accepted, err := v.N.IndexSerial()
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
	im := v.Canon.Manifest
	switch {
	case im.Base == nil && v.Canon.Digest != l.Image.Digest:
		a.Problem("unknown", "", "the node's image %s (%s) is not line %s's image %s (%s)", im.Version, v.Canon.Digest, l.Name, l.Image.Version, l.Image.Digest)
	case im.Base != nil && im.Base.Digest != l.Image.Digest:
		a.Problem("unknown", "", "the node's regenerated image was built from %s (%s), not line %s's image %s (%s)", im.Base.Version, im.Base.Digest, l.Name, l.Image.Version, l.Image.Digest)
	}
	// The node's sequence must be the index's, from where the node joined.
	pos := -1
	start := v.Ledger.Canonical().Head
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
	for _, e := range v.Applied {
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

// Files checks every file of the node's tree (b.Scan) against the
// expected tree and the ledger's tree digest, and each layer image of a
// backend that keeps them against the digest its apply recorded.
func Files(ctx context.Context, a *schema.Audit, v *view.View, b nodestate.Backend) error {
	a.FilesChecked = true
	want, err := v.Expected()
	if err != nil {
		a.Problem("chain", "", "%v", err)
		return nil
	}
	// Layer images first: a changed one explains the I/O errors that
	// reading the tree through it (dm-verity) meets.
	if lr, ok := b.(nodestate.LayerRebuilder); ok {
		problems, err := lr.CheckLayers(ctx)
		if err != nil {
			return err
		}
		for _, p := range problems {
			a.Problem("drift", p.Path, "%s: strata restart --repair rewrites it from its overlay", p.Msg)
		}
	}
	got, err := b.Scan(ctx)
	var drift []Drifted
	switch {
	case errors.Is(err, syscall.EIO):
		// The kernel refused a block (a changed root or layer image
		// under dm-verity, or a failing disk): that is the finding.
		a.Problem("unreadable", "", "reading the node's tree: %v: a block the kernel refused (dm-verity: a changed image or layer image, which a drift finding names, and strata restart --repair rewrites) or a failing disk", err)
		a.TreeDigest = "" // not known: the walk stopped
		got = nil
	case err != nil:
		return err
	default:
		got = Comparable(got, want, v.Image.Manifest.IsData)
		drift = Drift(want, got)
	}
	for _, d := range drift {
		a.Problem("drift", d.Path, "%s", d.Msg)
	}
	// The ledger's record of each layer image against the one the
	// overlay's signed manifest carries (overlays published with one).
	for i, m := range v.Overlays {
		rec := v.Applied[i].Layer
		if m.Layer != nil && rec != nil && *m.Layer != *rec {
			a.Problem("tampered", path.Join(manifests.StateDir, "layers", m.Version+".erofs"),
				"layer %s: the ledger records an image with sha256 %s and root hash %s, the overlay's signed manifest %s and %s", m.Version, rec.SHA256, rec.RootHash, m.Layer.SHA256, m.Layer.RootHash)
		}
	}
	sort.Slice(a.Findings, func(i, j int) bool { return a.Findings[i].Path < a.Findings[j].Path })
	if got == nil {
		return nil // the tree could not be read
	}
	d := manifests.TreeDigest(got)
	if d != v.Ledger.Last().TreeDigest && len(drift) == 0 {
		a.Problem("drift", "", "tree digest %s, ledger says %s", d, v.Ledger.Last().TreeDigest)
	}
	a.TreeDigest = d
	return nil
}

// Drifted is a path where the node's tree is not the expected one.
type Drifted struct {
	Path string
	Msg  string
}

// Drift compares the node's tree got with the expected tree want.
func Drift(want tree.State, got []manifests.Entry) []Drifted {
	have := tree.NewState(got)
	var drift []Drifted
	for p, w := range want {
		g, ok := have[p]
		switch {
		case !ok:
			drift = append(drift, Drifted{p, fmt.Sprintf("/%s is missing", p)})
		case g != w:
			drift = append(drift, Drifted{p, fmt.Sprintf("/%s differs: %s", p, DiffEntry(w, g))})
		}
	}
	for p, g := range have {
		if _, ok := want[p]; !ok {
			if g.Type == manifests.TypeDir && manifests.Within(manifests.StateDir, p) {
				continue // a parent of the state directory that strata made
			}
			drift = append(drift, Drifted{p, fmt.Sprintf("/%s is not part of the expected tree", p)})
		}
	}
	sort.Slice(drift, func(i, j int) bool { return drift[i].Path < drift[j].Path })
	return drift
}

// DiffEntry says how got differs from want, as an audit reports drift:
// "mode 0600, expected 0644; content changed".
func DiffEntry(want, got manifests.Entry) string {
	var parts []string
	for _, d := range manifests.EntryDiffs(want, got) {
		switch d.Field {
		case "content":
			parts = append(parts, "content changed")
		case "target":
			parts = append(parts, fmt.Sprintf("link target %q, expected %q", d.New, d.Old))
		default:
			parts = append(parts, fmt.Sprintf("%s %s, expected %s", d.Field, d.New, d.Old))
		}
	}
	return strings.Join(parts, "; ")
}

// Comparable is the scan got of a node's tree as audits compare it with
// want, the expected tree: the node's own data (isData: manifests.DataDirs,
// /var, and the image's declared data directories) is not judged, so what
// the node has there is replaced by what want has (and its tree digest is
// the expected one when nothing else differs); directories strata created
// only to hold its state directory go.
func Comparable(got []manifests.Entry, want tree.State, isData func(string) bool) []manifests.Entry {
	out := got[:0:0]
	for _, e := range got {
		if isData(e.Path) {
			continue
		}
		out = append(out, e)
	}
	for _, e := range want {
		if isData(e.Path) {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
