package repo

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/strata-dev/strata/internal/safefile"
	"github.com/strata-dev/strata/internal/sign"
	"github.com/strata-dev/strata/internal/tree"
	"github.com/strata-dev/strata/manifests"
)

// AddImage publishes image, a later whole image of one of the lines of
// the repository in dir, for nodes to upgrade to (strata upgrade --repo):
// an image of a newer recipe version than the line's image and its other
// upgrade images, or a regenerated image of the line (built from its
// image, through one of its overlays). The image must be signed by a key
// the line trusts at its head and trust key, which signs the new index.
// Nothing is written before every check holds.
func AddImage(ctx context.Context, dir, image string, key *sign.Key) (*manifests.ImageRef, error) {
	return AddImageBoot(ctx, dir, image, "", key)
}

// AddImageBoot is AddImage that also publishes bootImage ("": none), the
// image's boot image (a unified kernel image signed for Secure Boot that
// boots it on any node of the line, see manifests.BootImageCmdline), as
// images/LINE-VERSION.SHA.efi (SHA: the first 16 hex digits of its
// SHA-256), named by the image's index entry: nodes that boot signed
// kernel images upgrade themselves with it. It must be a signed UKI whose
// command line boots exactly the image's signed root hash; whether the
// firmware trusts its signer is the firmware's to say.
//
// For an image the line publishes already, it publishes (or replaces:
// after a db key rotation, say) that image's boot image, and nothing
// else changes; a replaced file is removed once the new index is saved.
func AddImageBoot(ctx context.Context, dir, image, bootImage string, key *sign.Key) (*manifests.ImageRef, error) {
	if IsURL(dir) {
		return nil, fmt.Errorf("adding image to repository %s: %w", dir, ErrRemote)
	}
	own, err := key.PublicKeySet()
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(image); err != nil {
		return nil, fmt.Errorf("adding image %s: %w", image, err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("adding image %s: not a regular file", image)
	}
	unlock, err := Lock(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	r, err := Open(ctx, dir, own)
	if err != nil {
		return nil, err
	}
	// Which line the manifest names is read before its signature is
	// checked, against that line's keys.
	im, err := LoadImage(image, nil)
	if err != nil {
		return nil, err
	}
	m := im.Manifest
	l, err := r.Index.Find(m.Line)
	if err != nil {
		return nil, fmt.Errorf("adding image %s: %w", image, err)
	}
	keys, err := HeadKeys(ctx, r, l)
	if err != nil {
		return nil, err
	}
	if im, err = LoadImage(image, keys); err != nil {
		return nil, fmt.Errorf("adding image %s: line %s trusts %v at its head: %w", image, l.Name, keys.IDs(), err)
	}
	if !keys.HasKey(key) {
		return nil, fmt.Errorf("adding image %s: signing key %s is not one line %s trusts at its head (trusted: %v): nodes would refuse the index: %w", image, key.ID(), l.Name, keys.IDs(), sign.ErrBadSignature)
	}
	if !im.Trusts(own) {
		return nil, fmt.Errorf("adding image %s: it does not trust signing key %s: nodes that upgrade to it could not verify this repository: %w", image, key.ID(), sign.ErrBadSignature)
	}
	m = im.Manifest
	var boot *checkedBoot
	var vd *VerityDoc
	if bootImage != "" {
		if vd, err = checkVerity(ctx, image, im, keys); err != nil {
			return nil, err
		}
		if boot, err = checkBootImage(image, im, vd, bootImage); err != nil {
			return nil, err
		}
		if im.Digest == l.Image.Digest {
			return nil, fmt.Errorf("adding boot image %s: %s %s is the line's own image, which nodes provision from and never upgrade to: %w", bootImage, m.Line, m.Version, ErrExists)
		}
		for i := range l.Upgrades {
			if u := &l.Upgrades[i]; u.Digest == im.Digest {
				// The root hash was read from this copy: it must be the
				// one published.
				sum, _, err := tree.HashFileContext(ctx, image)
				if err != nil {
					return nil, err
				}
				if sum != u.SHA256 {
					return nil, fmt.Errorf("adding boot image %s: image %s has sha256 %s, the one %s publishes %s: its boot image would boot another root hash: %w", bootImage, image, sum, u.File, u.SHA256, manifests.ErrBootImage)
				}
				return setBootImage(ctx, r, dir, m, u, boot, key)
			}
		}
	}
	ref := manifests.ImageRef{Version: m.Version, Digest: im.Digest}
	if err := checkUpgrade(l, m, &ref); err != nil {
		return nil, fmt.Errorf("adding image %s to line %s: %w", image, l.Name, err)
	}
	ref.File = path.Join("images", fmt.Sprintf("%s-%s.squashfs", m.Line, m.Version))
	mp := ManifestPath(ref.File)
	written := []string{ref.File, mp, SigPath(mp), VerityPath(ref.File), SigPath(VerityPath(ref.File))}
	if boot != nil {
		ref.Boot = boot.ref(m)
		written = append(written, ref.Boot.File)
	}
	st := Dir(dir)
	for _, f := range written {
		if there, err := Exists(ctx, st, f); err != nil {
			return nil, fmt.Errorf("adding image %s: %w", image, err)
		} else if there {
			return nil, fmt.Errorf("adding image %s: %s exists already and the index does not name it: %w", image, f, ErrExists)
		}
	}
	sig, err := safefile.ReadFollow(SigPath(ManifestPath(image)), sign.MaxSignatureSize)
	if err != nil {
		return nil, fmt.Errorf("adding image %s: %w", image, err)
	}
	if boot == nil {
		if vd, err = checkVerity(ctx, image, im, keys); err != nil {
			return nil, err
		}
	}
	// The index as it will be, checked before a file is written (the
	// squashfs's size and hash are filled in once it is copied).
	l.Upgrades = append(l.Upgrades, ref)
	probe := ref
	probe.SHA256, probe.Size = strings.Repeat("0", 64), 1
	l.Upgrades[len(l.Upgrades)-1] = probe
	if err := r.Index.Validate(); err != nil {
		return nil, fmt.Errorf("adding image %s: %w", image, err)
	}
	ok := false
	defer func() {
		if !ok {
			for _, f := range written {
				_ = st.Remove(context.WithoutCancel(ctx), f)
			}
		}
	}()
	if ref.SHA256, ref.Size, err = putFile(ctx, st, ref.File, image); err != nil {
		return nil, err
	}
	// The manifest and signature as verified, not read again.
	if err := st.Put(ctx, mp, bytes.NewReader(im.Raw)); err != nil {
		return nil, err
	}
	if err := st.Put(ctx, SigPath(mp), bytes.NewReader(sig)); err != nil {
		return nil, err
	}
	if err := putVerity(ctx, st, ref.File, vd); err != nil {
		return nil, err
	}
	if boot != nil {
		if err := boot.put(ctx, st, ref.Boot); err != nil {
			return nil, err
		}
	}
	l.Upgrades[len(l.Upgrades)-1] = ref
	if err := r.Save(ctx, key); err != nil {
		return nil, err
	}
	ok = true
	return &ref, nil
}

// checkUpgrade refuses image manifest m as an upgrade image of line l
// (segments loaded): not newer than the line's images, a regenerated
// image of another image or through a version the line lacks, or one
// published already. It sets ref.Head for a regenerated image.
func checkUpgrade(l *manifests.Line, m *manifests.ImageManifest, ref *manifests.ImageRef) error {
	if m.Head == nil {
		last := l.Image.Version
		for _, u := range l.Upgrades {
			if u.Head == nil {
				last = u.Version
			}
		}
		if manifests.CompareVersions(m.Version, last) <= 0 {
			return fmt.Errorf("version %s is not newer than %s, the line's newest image: %w", m.Version, last, ErrSequence)
		}
		return nil
	}
	if m.Base == nil || m.Base.Digest != l.Image.Digest {
		return fmt.Errorf("a regenerated image built from another image than the line's %s (%s): %w", l.Image.Version, l.Image.Digest, ErrSequence)
	}
	found := false
	for _, o := range l.Overlays {
		found = found || o.Version == m.Head.Version && o.Digest == m.Head.Digest
	}
	if !found {
		return fmt.Errorf("regenerated through %s (%s), which is not an overlay of the line: %w", m.Head.Version, m.Head.Digest, ErrSequence)
	}
	for _, u := range l.Upgrades {
		if u.Head != nil && u.Head.Digest == m.Head.Digest {
			return fmt.Errorf("the line has a regenerated image through %s already (%s): %w", m.Head.Version, u.File, ErrExists)
		}
	}
	h := *m.Head
	ref.Head = &h
	return nil
}
